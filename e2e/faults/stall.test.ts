import { afterAll, beforeAll, describe, it } from 'vitest';
import type { World } from '../test/support.js';
import { lifecycleStall, OPERATIONS, runFaultCase, startFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11, the long faults (`npm run test:faults`): lifecycle stalled (SIGSTOP) for twice the
 * registry TTL with a stop, an interrupt or a cancel sent meanwhile (e2e/test/fault-world.ts).
 * After SIGCONT the invariant checker passes over what each caller was told: nothing runs
 * unregistered or unwanted, and the stack serves again.
 */
let w: World;
const agentPids = new Map<string, number>();
beforeAll(async () => {
  w = await startFaultWorld();
}, 120_000);
afterAll(async () => w?.stop());

describe(lifecycleStall.name, () => {
  it.each(OPERATIONS)('with a $name sent during the stall', (op) => runFaultCase(w, agentPids, op, lifecycleStall).then(() => undefined), 180_000);
});
