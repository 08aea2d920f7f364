import { describe } from 'vitest';
import { faultMatrix, kill9NatsNode, kill9Replica, useFaultWorld } from '../test/fault-world.js';

/**
 * B-6, the whole scale-out matrix (`npm run test:scale`): on a 3-node NATS cluster with 2 processes
 * of every service, every control operation (stop, interrupt, turn cancel) while one replica of each
 * backend service is killed with SIGKILL mid-operation, and while one NATS node is. After each
 * case the invariant checker must pass over what the caller was told (every accepted request took
 * effect once, no agent of a stopped task lives on, nothing answered twice), and the system must
 * serve again. The cases that fit `npm test` are in e2e/test/scale.test.ts.
 */
const fw = useFaultWorld({ natsCluster: 3, replicas: 2 });

describe('scale-out: replica and node loss', () => {
  faultMatrix(fw, [kill9Replica('orchestrator'), kill9Replica('lifecycle'), kill9Replica('holds'), kill9Replica('mcp'), kill9NatsNode]);
});
