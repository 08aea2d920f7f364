import {
  canAccessWorkspace,
  forbidden,
  notFound,
  PageLimits,
  validationError,
  INBOX_MAX_ITEMS,
  type Actor,
  type Inbox,
  type MessagePage,
  type OperatorActor,
  type TaskListRequest,
  type TaskPage,
  type Workspace,
  type WorkspacePage,
} from '@kandev/contracts';
import { assertCanAccess } from '../domain/access.js';
import { containsPattern, decodeCursor, pageOf, pageSize } from '../domain/paging.js';
import { consumeWsTicket, getWorkspace, listTasks, listWorkspaces, pendingInbox } from '../store/read.js';
import { toTask } from '../store/rows.js';
import { getSession } from '../store/sessions.js';
import { getTask } from '../store/tasks.js';
import { transcriptPage } from '../store/transcript.js';
import type { OrchRuntime } from './context.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** the workspaces the operator's token names (`*` = all), newest first. */
export async function workspacePage(
  rt: OrchRuntime,
  req: { actor: OperatorActor; limit?: number | undefined; cursor?: string | undefined },
): Promise<WorkspacePage> {
  const limit = pageSize(req.limit, PageLimits.workspaces);
  const after = req.cursor ? decodeCursor(req.cursor) : null;
  // A token may name ids that are not UUIDs (the claim is free text); they name no workspace.
  const ids = req.actor.workspaces.includes('*') ? null : req.actor.workspaces.filter((w) => UUID.test(w));
  if (ids && ids.length === 0) return { items: [], next_cursor: null };
  const rows = await listWorkspaces(rt.sql, { ids, after, limit: limit + 1 });
  const page = pageOf(rows, limit);
  return { items: page.rows.map(({ id, name, created_at }) => ({ id, name, created_at })), next_cursor: page.next_cursor };
}

/** One workspace the actor may see; NOT_FOUND for none, FORBIDDEN for one outside the token. */
export async function workspaceOf(rt: OrchRuntime, actor: Actor, workspaceId: string): Promise<Workspace> {
  // The token is checked first: whether a workspace outside it exists is not the caller's to learn.
  if (!canAccessWorkspace(actor, workspaceId)) throw forbidden('no access to this workspace');
  const ws = await getWorkspace(rt.sql, workspaceId);
  if (!ws) throw notFound('workspace not found');
  return ws;
}

/** a page of a workspace's tasks, newest first, filtered; with child, session and hold badges. */
export async function taskPage(rt: OrchRuntime, req: TaskListRequest): Promise<TaskPage> {
  if (req.parent_id && req.roots) throw validationError('parent_id and roots=true exclude each other', { params: ['parent_id', 'roots'] });
  const limit = pageSize(req.limit, PageLimits.tasks);
  const after = req.cursor ? decodeCursor(req.cursor) : null;
  await workspaceOf(rt, req.actor, req.workspace_id);
  const rows = await listTasks(
    rt.sql,
    {
      workspace_id: req.workspace_id,
      parent_id: req.parent_id,
      roots: req.roots,
      status: req.status,
      titlePattern: req.q ? containsPattern(req.q) : undefined,
      archived: req.archived,
    },
    { after, limit: limit + 1 },
  );
  const page = pageOf(rows, limit);
  return {
    items: page.rows.map((r) => ({ ...toTask(r), child_count: r.child_count, active_session_count: r.active_session_count, hold: r.hold })),
    next_cursor: page.next_cursor,
  };
}

/** a page of a session's transcript, oldest first, after `after_seq`. */
export async function messagePage(
  rt: OrchRuntime,
  req: { actor: Actor; session_id: string; after_seq?: number | undefined; limit?: number | undefined },
): Promise<MessagePage> {
  const limit = pageSize(req.limit, PageLimits.messages);
  const session = await getSession(rt.sql, req.session_id);
  if (!session) throw notFound('session not found');
  assertCanAccess(req.actor, await getTask(rt.sql, session.task_id), 'session');
  const rows = await transcriptPage(rt.sql, req.session_id, req.after_seq ?? 0, limit + 1);
  const items = rows.slice(0, limit);
  // The cursor of a transcript is the last seq read: pass it back as after_seq.
  return { items, next_cursor: rows.length > limit ? String(items[items.length - 1]!.seq) : null };
}

/**
 * everything of a workspace that waits on a person, oldest first: pending question bundles
 * (not expired) and pending permission requests, of every task of the workspace (children included).
 */
export async function inbox(rt: OrchRuntime, req: { actor: Actor; workspace_id: string }): Promise<Inbox> {
  await workspaceOf(rt, req.actor, req.workspace_id);
  const rows = await pendingInbox(rt.sql, req.workspace_id, INBOX_MAX_ITEMS + 1);
  return {
    items: rows.slice(0, INBOX_MAX_ITEMS).map((r) => ({
      kind: r.kind,
      id: r.id,
      task_id: r.task_id,
      task_title: r.task_title,
      session_id: r.session_id,
      created_at: r.created_at,
      text: r.text ?? '',
      ancestor_ids: r.ancestor_ids,
      expires_at: r.expires_at,
    })),
    truncated: rows.length > INBOX_MAX_ITEMS,
  };
}

/** ADR 0058: the single use of a /ws ticket, recorded where every gateway replica's check meets. */
export async function wsTicketConsume(rt: OrchRuntime, req: { actor: OperatorActor; jti: string; expires_at: string }): Promise<{ first: boolean }> {
  if (Number.isNaN(Date.parse(req.expires_at))) throw validationError('expires_at must be a timestamp', { field: 'expires_at' });
  return { first: await consumeWsTicket(rt.sql, req.jti, req.actor.id, req.expires_at) };
}
