import { Orch } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import { admitExecution } from '../flows/admit.js';
import type { OrchRuntime } from '../flows/context.js';

/** What the lifecycle service asks of the orchestrator. */
export const lifecycleEndpoints = (rt: OrchRuntime): Registration[] => [on(Orch.executionAdmit, (req) => admitExecution(rt, req))];
