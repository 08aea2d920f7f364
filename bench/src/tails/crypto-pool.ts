import { generateKeyPairSync, sign, verify } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { against, type Figure } from '../results.js';
import { summarize } from '../stats.js';

/**
 * What a caller assertion's verify costs while libuv's thread pool is busy with file work, as a
 * lifecycle's is during a teardown or a launch (here: /proc/<pid>/status of every process read
 * through fs/promises, over and over). Two ways, interleaved in rounds: WebCrypto's
 * `subtle.verify` (a thread-pool job each: what `jose`, which the bus identity used until ADR 0073, calls) and node:crypto's one-shot
 * `verify` on the event loop (as it does now). The floor is the same verify with the pool idle.
 */
async function procSweep(): Promise<void> {
  const pids = (await readdir('/proc')).filter((n) => /^\d+$/.test(n));
  await Promise.all(pids.map((p) => readFile(`/proc/${p}/status`, 'utf8').catch(() => null)));
}

async function timed(n: number, op: () => Promise<unknown> | unknown): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await op();
    out.push(performance.now() - t);
  }
  return out;
}

async function whilePoolBusy<T>(fn: () => Promise<T>): Promise<T> {
  let busy = true;
  const sweeps = (async () => {
    while (busy) await procSweep();
  })();
  try {
    return await fn();
  } finally {
    busy = false;
    await sweeps;
  }
}

const WAYS = {
  webcrypto: "WebCrypto's subtle.verify (a pool job each: jose, before ADR 0073)",
  node_crypto: "node:crypto's one-shot verify on the event loop (now)",
} as const;
const WHAT = 'verify of one caller assertion (Ed25519 compact JWS)';
const BUSY = 'while fs/promises reads /proc/<pid>/status of every process in a loop';
const slug = (way: string) => way.replace(/_/g, '-');

/** Figures `pool.<way>.idle` and `pool.<way>.pool-busy` (read against the idle one), and `pool.node-crypto.sign-idle`. */
export async function cryptoPool(rounds = 5, perRound = 200): Promise<Figure[]> {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const input = Buffer.from(`${b64({ alg: 'EdDSA', kid: 'gateway' })}.${b64({ bh: 'x', exp: Math.floor(Date.now() / 1000) + 3600 })}`);
  const signature = sign(null, input, privateKey);
  const subtleKey = await crypto.subtle.importKey('spki', publicKey.export({ format: 'der', type: 'spki' }), { name: 'Ed25519' }, false, ['verify']);
  const ways: Record<keyof typeof WAYS, () => Promise<unknown> | unknown> = {
    webcrypto: async () => (await crypto.subtle.verify({ name: 'Ed25519' }, subtleKey, signature, input)) || Promise.reject(new Error('bad signature')),
    node_crypto: () => verify(null, input, publicKey, signature) || Promise.reject(new Error('bad signature')),
  };
  const samples = Object.fromEntries(Object.keys(ways).map((w) => [w, { idle: [] as number[], busy: [] as number[] }]));
  for (let r = 0; r < rounds; r++)
    for (const [name, op] of Object.entries(ways)) {
      samples[name]!.idle.push(...(await timed(perRound, op)));
      samples[name]!.busy.push(...(await whilePoolBusy(() => timed(perRound, op))));
    }
  // The signer's side the same way (sign is as much a pool job in WebCrypto).
  const signIdle = summarize(await timed(perRound, () => sign(null, input, privateKey)));
  const figures: Figure[] = [];
  for (const [name, what] of Object.entries(WAYS)) {
    const idle = summarize(samples[name]!.idle);
    const busy = summarize(samples[name]!.busy);
    const idleId = `pool.${slug(name)}.idle`;
    figures.push({ id: idleId, label: `${WHAT}: ${what}, pool idle`, ...idle });
    figures.push({ id: `pool.${slug(name)}.pool-busy`, label: `${WHAT}: ${what}, ${BUSY}`, ...busy, ...against(busy, idleId, idle) });
  }
  figures.push({ id: 'pool.node-crypto.sign-idle', label: "sign of one caller assertion: node:crypto's one-shot sign, pool idle", ...signIdle });
  return figures;
}
