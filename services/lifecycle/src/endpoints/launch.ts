import { Life } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { ExecutionSupervisor } from '../supervisor.js';

/** Queue group: whichever instance takes a launch owns the execution. */
export const launchEndpoints = (supervisor: ExecutionSupervisor): Registration[] => [on(Life.launch, (req) => supervisor.launch(req))];
