import { Life } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { loadCatalogue } from '@kandev/agentctl';
import type { ExecutionSupervisor } from '../supervisor.js';

/**
 * Queue group: whichever instance takes a launch owns the execution. Served apart from every other
 * endpoint (service.ts) so that a drain can end just these subscriptions: the queue group then
 * hands every launch and reservation to the other instances.
 */
export const launchEndpoints = (supervisor: ExecutionSupervisor): Registration[] => [
  on(Life.launch, (req) => supervisor.launch(req)),
  on(Life.reserveLaunch, async (req) => supervisor.reserveLaunch(req.execution_id)),
];

/** The agent list lets the orchestrator refuse an unknown agent before it writes anything (a launch re-checks it anyway); a draining instance still answers it. */
export const catalogueEndpoints = (): Registration[] => [on(Life.agents, async () => ({ agents: [...loadCatalogue().keys()].sort() }))];
