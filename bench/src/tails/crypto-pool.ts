import { generateKeyPairSync, sign, verify } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
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

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const row = (xs: number[]) => {
  const s = summarize(xs);
  return { n: s.n, p50_ms: r3(s.p50), p99_ms: r3(s.p99), max_ms: r3(s.max) };
};

export async function cryptoPool(rounds = 5, perRound = 200) {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const input = Buffer.from(`${b64({ alg: 'EdDSA', kid: 'gateway' })}.${b64({ bh: 'x', exp: Math.floor(Date.now() / 1000) + 3600 })}`);
  const signature = sign(null, input, privateKey);
  const subtleKey = await crypto.subtle.importKey('spki', publicKey.export({ format: 'der', type: 'spki' }), { name: 'Ed25519' }, false, ['verify']);
  const ways = {
    webcrypto: async () => (await crypto.subtle.verify({ name: 'Ed25519' }, subtleKey, signature, input)) || Promise.reject(new Error('bad signature')),
    node_crypto: () => verify(null, input, publicKey, signature) || Promise.reject(new Error('bad signature')),
  };
  const samples: Record<string, number[]> = { webcrypto_idle: [], webcrypto_pool_busy: [], node_crypto_idle: [], node_crypto_pool_busy: [] };
  for (let r = 0; r < rounds; r++)
    for (const [name, op] of Object.entries(ways)) {
      samples[`${name}_idle`]!.push(...(await timed(perRound, op)));
      samples[`${name}_pool_busy`]!.push(...(await whilePoolBusy(() => timed(perRound, op))));
    }
  // The signer's side the same way (sign is as much a pool job in WebCrypto).
  const signIdle = await timed(perRound, () => sign(null, input, privateKey));
  return {
    what: 'verify of one caller assertion (Ed25519 compact JWS), ms; pool_busy = while fs/promises reads /proc/<pid>/status of every process in a loop',
    ...Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, row(xs)])),
    node_crypto_sign_idle: row(signIdle),
  };
}
