import { describe, expect, it } from 'vitest';
import { WsClient } from '@kandev/testkit';
import { makeTask, sleepScript } from './support.js';
import { agentOf, kill9NatsNode, kill9Replica, OPERATIONS, runFaultCase, TREE_OPERATIONS, useFaultWorld } from './fault-world.js';
import { runCrossReplicaCancel } from './scale-cases.js';

/**
 * B-6, the part of the scale-out proof that fits `npm test`: a 3-node NATS cluster (event stream
 * and registry bucket with 3 replicas) and 2 processes of every service. The whole matrix (every
 * control operation, tree control, wakeup dispatch and clarification wait × the loss of a replica
 * of each backend service and of a NATS node) is `npm run test:scale` (e2e/scale/).
 */
const fw = useFaultWorld({ natsCluster: 3, replicas: 2 });
const stop = OPERATIONS.find((o) => o.name === 'stop')!;
const treePause = TREE_OPERATIONS.find((o) => o.name === 'tree pause')!;

describe('scale-out topology: 3 NATS nodes, 2 replicas of every service', () => {
  it('a /ws client on one gateway replica sees what an operator did through the other', async () => {
    const w = fw.world();
    const otherGateway = w.stack.replicas('gateway')[0]!.urls.http!;
    const ws = await WsClient.connect(otherGateway.replace(/^http/, 'ws') + '/ws', w.token);
    try {
      const { task } = await makeTask(w.api);
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
      await agentOf(w, fw.agentPids, task.id, session.id);
      await ws.request('subscribe', { task_id: task.id });
      expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
      await ws.waitFor((f) => f.action === 'session.state_changed' && f.payload.session_id === session.id, 30_000);
    } finally {
      ws.close();
    }
  });

  it(
    'an operator stop while the orchestrator replica deciding it is killed mid-transaction: the invariants hold over its answer',
    () => runFaultCase(fw.world(), fw.agentPids, stop, kill9Replica('orchestrator')).then(() => undefined),
    180_000,
  );

  it(
    'an operator stop while one NATS node is killed: the invariants hold over its answer',
    () => runFaultCase(fw.world(), fw.agentPids, stop, kill9NatsNode).then(() => undefined),
    180_000,
  );

  it(
    'a tree pause while the orchestrator replica deciding it is killed mid-transaction: every agent of the tree is gone and the invariants hold over its answer',
    () => runFaultCase(fw.world(), fw.agentPids, treePause, kill9Replica('orchestrator')).then(() => undefined),
    180_000,
  );

  it(
    'an agent cancelling its clarification wait through the other mcp replica ends the wait at once (ADR 0037)',
    () => runCrossReplicaCancel(fw.world(), fw.agentPids),
    120_000,
  );
});
