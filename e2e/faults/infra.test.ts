import { afterAll, beforeAll, describe, it } from 'vitest';
import type { World } from '../test/support.js';
import { natsRestart, OPERATIONS, pgRefusing, runFaultCase, startFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11, infrastructure faults (`npm run test:faults`) in the middle of a stop, an interrupt and
 * a cancel (e2e/test/fault-world.ts): nats-server restarted (down 2 s, same port and JetStream
 * store), and PostgreSQL refusing connections to the system's database for 3 s. Every request is
 * answered; after recovery the invariant checker passes over the answers and the stack serves again.
 */
let w: World;
const agentPids = new Map<string, number>();
beforeAll(async () => {
  w = await startFaultWorld();
}, 120_000);
afterAll(async () => w?.stop());

describe.each([natsRestart, pgRefusing])('$name', (fault) => {
  it.each(OPERATIONS)('in the middle of a $name', (op) => runFaultCase(w, agentPids, op, fault).then(() => undefined), 180_000);
});
