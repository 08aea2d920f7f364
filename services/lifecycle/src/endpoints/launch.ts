import { Life } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { loadCatalogue } from '@kandev/agentctl/catalogue';
import type { ExecutionSupervisor } from '../supervisor.js';

/**
 * Queue group: whichever instance takes a launch owns the execution. The agent list lets the
 * orchestrator refuse an unknown agent before it writes anything (a launch re-checks it anyway).
 */
export const launchEndpoints = (supervisor: ExecutionSupervisor): Registration[] => [
  on(Life.launch, (req) => supervisor.launch(req)),
  on(Life.reserveLaunch, async (req) => supervisor.reserveLaunch(req.execution_id)),
  on(Life.agents, async () => ({ agents: [...loadCatalogue().keys()].sort() })),
];
