import { describe } from 'vitest';
import { faultMatrix, kill9NatsNode, kill9Replica, TREE_OPERATIONS, useFaultWorld } from '../test/fault-world.js';

/**
 * The tree controls in the scale-out matrix (`npm run test:scale`): on a 3-node NATS cluster
 * with 2 processes of every service, tree pause, cancel, resume and restore through the HTTP API
 * while one replica of each backend service, or one NATS node, is killed with SIGKILL in the
 * middle. After each case the invariant checker holds the system to the answer: a hold the caller
 * was given is recorded and stopped every session of its members (their agents are gone); a
 * release the caller was given released the hold once and (restore) wrote the snapshots back; the
 * answer, a result or an error, came within the request deadline.
 */
const fw = useFaultWorld({ natsCluster: 3, replicas: 2 });

describe('scale-out: tree controls under replica and node loss', () => {
  faultMatrix(
    fw,
    [kill9Replica('orchestrator'), kill9Replica('lifecycle'), kill9Replica('holds'), kill9Replica('mcp'), kill9NatsNode],
    'in the middle of a $name',
    TREE_OPERATIONS,
  );
});
