import { conflict, Orch, validationError, type OperatorActor, type RequestOf } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import { z } from 'zod';
import type { WsClient } from './client.js';
import type { SubscriptionRegistry } from './subscriptions.js';
import { subscribeWorkspace, unsubscribeWorkspace, workspaceRefOf } from './workspace-subscription.js';

export interface ActionContext {
  actor: OperatorActor;
  client: WsClient;
  requestId: string;
  nc: NatsConnection;
  timeoutMs: number;
  subscriptions: SubscriptionRegistry<WsClient>;
}
export type ActionHandler = (payload: unknown, ctx: ActionContext) => Promise<unknown>;

/** Bound on one socket's subscriptions, so a client cannot grow the fan-out map without limit. */
export const MAX_SUBSCRIPTIONS_PER_SOCKET = 500;

const TaskRef = z.object({ task_id: z.uuid() });

function payloadObject(payload: unknown): Record<string, unknown> {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw validationError('payload must be a JSON object');
  return payload as Record<string, unknown>;
}
function taskRef(payload: unknown): string {
  const p = TaskRef.safeParse(payloadObject(payload));
  if (!p.success)
    throw validationError('payload needs task_id (UUID)', { issues: p.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) });
  return p.data.task_id;
}
const opts = (ctx: ActionContext) => ({ requestId: ctx.requestId, timeoutMs: ctx.timeoutMs });

/**
 * The public WebSocket actions. Anything not in this table is UNKNOWN_ACTION; `mcp.*`
 * never gets this far (domain/action-guard). The actor is set last so a payload cannot replace it.
 */
export const ACTIONS: ReadonlyMap<string, ActionHandler> = new Map<string, ActionHandler>([
  // Payload fields are checked against the contract by `request` (VALIDATION_ERROR with its issues).
  [
    'agent.cancel',
    (payload, ctx) => request(ctx.nc, Orch.agentCancel, { ...payloadObject(payload), actor: ctx.actor } as RequestOf<typeof Orch.agentCancel>, opts(ctx)),
  ],
  [
    'task.stop',
    (payload, ctx) => request(ctx.nc, Orch.taskStop, { ...payloadObject(payload), actor: ctx.actor } as RequestOf<typeof Orch.taskStop>, opts(ctx)),
  ],
  [
    'subscribe',
    async (payload, ctx) => {
      const workspaceId = workspaceRefOf(payload);
      if (workspaceId) return subscribeWorkspace(workspaceId, ctx, MAX_SUBSCRIPTIONS_PER_SOCKET);
      const taskId = taskRef(payload);
      // The place is taken before the lookup is awaited: 1,500 frames at once still make 500 at most.
      const release = ctx.subscriptions.reserve(ctx.client, MAX_SUBSCRIPTIONS_PER_SOCKET);
      if (!release) throw conflict('too many subscriptions on this socket', { limit: MAX_SUBSCRIPTIONS_PER_SOCKET });
      try {
        // The orchestrator decides visibility: FORBIDDEN / NOT_FOUND reach the client unchanged.
        await request(ctx.nc, Orch.taskGet, { actor: ctx.actor, task_id: taskId }, opts(ctx));
        if (ctx.client.open) ctx.subscriptions.add(ctx.client, taskId);
      } finally {
        release();
      }
      return { subscribed: true, task_id: taskId };
    },
  ],
  [
    'unsubscribe',
    async (payload, ctx) => {
      const workspaceId = workspaceRefOf(payload);
      if (workspaceId) return unsubscribeWorkspace(workspaceId, ctx);
      const taskId = taskRef(payload);
      ctx.subscriptions.remove(ctx.client, taskId);
      return { subscribed: false, task_id: taskId };
    },
  ],
]);
