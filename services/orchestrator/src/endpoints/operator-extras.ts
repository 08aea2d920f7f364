import { OrchOperatorExtras } from '@kandev/contracts';
import { on, type Registration } from '@kandev/runtime';
import type { OrchRuntime } from '../flows/context.js';
import { listAgents, queueByOperator } from '../flows/operator-queue.js';

/** The console's and CLI's additions to the operator surface (GET /agents, POST /tasks/:id/queue). */
export const operatorExtraEndpoints = (rt: OrchRuntime): Registration[] => [
  on(OrchOperatorExtras.agentList, (_req, ctx) => listAgents(rt, ctx)),
  on(OrchOperatorExtras.queueAdd, (req, ctx) => queueByOperator(rt, ctx, req.actor, req.task_id, req.prompt)),
];
