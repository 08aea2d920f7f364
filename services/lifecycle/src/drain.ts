/*
 * `node services/lifecycle/dist/drain.bundle.js [--instance ID] [--mode stop|wait] [--wait-ms N] [--grace-ms N]`
 *
 * Drains one lifecycle instance (Life.drain) and prints its report as one JSON line. Made for the
 * pod's preStop hook, which runs it inside the lifecycle container and so has that container's
 * NATS_URL, NATS_USER, NATS_PASS and INSTANCE_ID; an operator runs the same with `kubectl exec`
 * (docs/operations.md, "Rolling out lifecycle"). Exit 0 with the report, 1 with an error.
 */
import { Life, isKandevError } from '@kandev/contracts';
import { bindBusIdentity, busIdentityFromEnv, connectNats, isProduction, request } from '@kandev/runtime';
import { parseArgs } from 'node:util';

/** What the drain may take beyond its wait and grace: agentctl's own exit wait, the teardown's registry and event writes. */
const TEARDOWN_MARGIN_MS = 15_000;

const { values } = parseArgs({
  options: {
    instance: { type: 'string' },
    mode: { type: 'string' },
    'wait-ms': { type: 'string' },
    'grace-ms': { type: 'string' },
  },
});

const int = (name: string, v: string | undefined): number | undefined => {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
};

async function main(): Promise<void> {
  const instance = values.instance ?? process.env.INSTANCE_ID;
  if (!instance) throw new Error('no instance: pass --instance or set INSTANCE_ID (the pod name, in a lifecycle pod)');
  const mode = values.mode ?? 'stop';
  if (mode !== 'stop' && mode !== 'wait') throw new Error('--mode must be stop or wait');
  const waitMs = int('--wait-ms', values['wait-ms']) ?? int('DRAIN_WAIT_MS', process.env.DRAIN_WAIT_MS) ?? 20_000;
  const graceMs = int('--grace-ms', values['grace-ms']) ?? int('TEARDOWN_GRACE_MS', process.env.TEARDOWN_GRACE_MS) ?? 2_000;
  const nc = await connectNats({
    url: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    name: `lifecycle-drain:${instance}`,
    user: process.env.NATS_USER,
    pass: process.env.NATS_PASS,
  });
  // Signed as lifecycle (the container's own key): lifecycle takes a drain from itself or the orchestrator only (ADR 0055).
  const identity = busIdentityFromEnv('lifecycle', process.env, isProduction(process.env));
  if (identity) bindBusIdentity(nc, identity);
  try {
    const report = await request(
      nc,
      Life.drain.at(instance),
      { mode, wait_ms: waitMs, grace_ms: graceMs },
      { timeoutMs: waitMs + graceMs + TEARDOWN_MARGIN_MS },
    );
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } finally {
    await nc.close();
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    const err = isKandevError(e) ? e.toBody() : { message: e instanceof Error ? e.message : String(e) };
    process.stderr.write(`${JSON.stringify({ level: 'error', msg: 'drain failed', err })}\n`);
    process.exit(1);
  },
);
