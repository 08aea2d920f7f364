import { conflict, OrchRead, validationError } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { workspaceKey } from '../domain/notifications.js';
import type { ActionContext } from './actions.js';

/*
 * `subscribe` / `unsubscribe` `{workspace_id}`: every task event of a workspace (the console's board).
 * Kept in the same registry as task subscriptions under the key `workspace:<id>`, so it counts
 * against the same per-socket cap and goes with the socket.
 */

const WorkspaceRef = z.object({ workspace_id: z.uuid() });

/** The workspace a subscribe/unsubscribe payload names, or null when it names a task instead. */
export function workspaceRefOf(payload: unknown): string | null {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return null;
  const p = payload as Record<string, unknown>;
  if (!('workspace_id' in p) || 'task_id' in p) return null;
  const parsed = WorkspaceRef.safeParse(p);
  if (!parsed.success)
    throw validationError('payload needs workspace_id (UUID)', { issues: parsed.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) });
  return parsed.data.workspace_id;
}

export async function subscribeWorkspace(workspaceId: string, ctx: ActionContext, maxPerSocket: number) {
  // The place is taken before the lookup is awaited (as for tasks): 1,200 frames at once still make `maxPerSocket` at most.
  const release = ctx.subscriptions.reserve(ctx.client, maxPerSocket);
  if (!release) throw conflict('too many subscriptions on this socket', { limit: maxPerSocket });
  try {
    // The orchestrator decides visibility: FORBIDDEN (outside the token) / NOT_FOUND reach the client unchanged.
    await request(ctx.nc, OrchRead.workspaceGet, { actor: ctx.actor, workspace_id: workspaceId }, { requestId: ctx.requestId, timeoutMs: ctx.timeoutMs });
    if (ctx.client.open) ctx.subscriptions.add(ctx.client, workspaceKey(workspaceId));
  } finally {
    release();
  }
  return { subscribed: true, workspace_id: workspaceId };
}

export function unsubscribeWorkspace(workspaceId: string, ctx: ActionContext) {
  ctx.subscriptions.remove(ctx.client, workspaceKey(workspaceId));
  return { subscribed: false, workspace_id: workspaceId };
}
