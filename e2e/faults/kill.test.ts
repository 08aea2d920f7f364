import { afterAll, beforeAll, describe, it } from 'vitest';
import { STACK_SERVICES } from '@kandev/testkit';
import type { World } from '../test/support.js';
import { kill9, OPERATIONS, runFaultCase, startFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11 (`npm run test:faults`): kill -9 of each service in the middle of a stop, an interrupt
 * and a cancel (e2e/test/fault-world.ts). After the restart the invariant checker passes over what
 * each caller was told, and the stack serves again.
 */
let w: World;
const agentPids = new Map<string, number>();
beforeAll(async () => {
  w = await startFaultWorld();
}, 120_000);
afterAll(async () => w?.stop());

describe.each(STACK_SERVICES.map(kill9))('$name', (fault) => {
  it.each(OPERATIONS)('in the middle of a $name', (op) => runFaultCase(w, agentPids, op, fault).then(() => undefined), 180_000);
});
