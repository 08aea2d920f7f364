import { describe, it } from 'vitest';
import { useFaultWorld } from '../test/fault-world.js';
import { runClarificationCase, runCrossReplicaCancel, runWakeupCase } from '../test/scale-cases.js';

/**
 * Work that waits, in the scale-out matrix (`npm run test:scale`), on a 3-node NATS cluster with 2
 * processes of every service: a wakeup dispatched while a holds or an orchestrator process is
 * killed starts exactly one session; an agent waiting on ask_user_questions while its mcp process
 * or an orchestrator process is killed gets the operator's answer or an error, never silence past
 * the bundle's expiry; a cancel of that wait sent to another mcp process ends it at once (ADR 0037).
 */
const fw = useFaultWorld({ natsCluster: 3, replicas: 2 });

describe('scale-out: wakeups and clarifications under replica loss', () => {
  it.each(['holds', 'orchestrator'] as const)(
    'a wakeup dispatched while one %s replica is killed starts exactly one session',
    (service) => runWakeupCase(fw.world(), fw.agentPids, service),
    180_000,
  );
  it.each(['mcp', 'orchestrator'] as const)(
    'an agent waiting on ask_user_questions while the %s process it relies on is killed gets the answer or an error, never silence',
    (service) => runClarificationCase(fw.world(), fw.agentPids, service),
    180_000,
  );
  it('a notifications/cancelled sent to the other mcp replica ends the wait at once', () => runCrossReplicaCancel(fw.world(), fw.agentPids), 120_000);
});
