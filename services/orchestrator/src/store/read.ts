import { ACTIVE_SESSION_STATES, type HoldMode, type TaskStatus, type Workspace } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import type { SortKey } from '../domain/paging.js';
import { columns, TASK_COLUMNS, type TaskRow } from './rows.js';

type Q = Sql | Tx;

export interface WorkspaceListRow extends Workspace {
  /** created_at at full precision (the ISO form the driver gives is cut to milliseconds): a page's sort key. */
  sort_ts: string;
}

/** Workspaces newest first after `after`; `ids` null = every workspace. Fetches `limit` rows. */
export async function listWorkspaces(q: Q, opts: { ids: string[] | null; after: SortKey | null; limit: number }): Promise<WorkspaceListRow[]> {
  return q<WorkspaceListRow[]>`
    SELECT id, name, created_at, created_at::text AS sort_ts FROM workspaces
    WHERE true
      ${opts.ids ? q`AND id = ANY(${opts.ids}::uuid[])` : q``}
      ${opts.after ? q`AND (created_at, id) < (${opts.after.ts}::timestamptz, ${opts.after.id}::uuid)` : q``}
    ORDER BY created_at DESC, id DESC
    LIMIT ${opts.limit}`;
}

export async function getWorkspace(q: Q, id: string): Promise<Workspace | null> {
  const [row] = await q<Workspace[]>`SELECT id, name, created_at FROM workspaces WHERE id = ${id}`;
  return row ?? null;
}

export interface TaskListFilter {
  workspace_id: string;
  parent_id?: string | undefined;
  roots?: boolean | undefined;
  status?: readonly TaskStatus[] | undefined;
  /** An ILIKE pattern (domain/paging.ts containsPattern). */
  titlePattern?: string | undefined;
  archived?: boolean | undefined;
}

export interface TaskListRow extends TaskRow {
  sort_ts: string;
  child_count: number;
  active_session_count: number;
  hold: { id: string; mode: HoldMode } | null;
}

/**
 * Tasks of one workspace, newest first after `after`, with what a board card shows: direct child
 * count, active sessions, the active hold. Each filter shape has an index that yields rows in this
 * order (migrations/006), so a page reads about `limit` index entries plus three index probes a row.
 */
export async function listTasks(q: Q, f: TaskListFilter, opts: { after: SortKey | null; limit: number }): Promise<TaskListRow[]> {
  const rows = await q<TaskListRow[]>`
    SELECT ${columns(q, TASK_COLUMNS, 't')}, t.created_at::text AS sort_ts,
      (SELECT count(*) FROM tasks c WHERE c.parent_id = t.id)::int AS child_count,
      (SELECT count(*) FROM sessions s WHERE s.task_id = t.id AND s.state IN ${q([...ACTIVE_SESSION_STATES])})::int AS active_session_count,
      (SELECT json_build_object('id', h.id, 'mode', h.mode) FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
        WHERE m.task_id = t.id AND m.active LIMIT 1) AS hold
    FROM tasks t
    WHERE t.workspace_id = ${f.workspace_id}
      ${f.parent_id ? q`AND t.parent_id = ${f.parent_id}` : f.roots ? q`AND t.parent_id IS NULL` : q``}
      ${f.status?.length === 1 ? q`AND t.status = ${f.status[0]!}` : f.status ? q`AND t.status = ANY(${[...f.status]}::text[])` : q``}
      ${f.titlePattern ? q`AND t.title ILIKE ${f.titlePattern}` : q``}
      ${f.archived === true ? q`AND t.archived_at IS NOT NULL` : f.archived === false ? q`AND t.archived_at IS NULL` : q``}
      ${opts.after ? q`AND (t.created_at, t.id) < (${opts.after.ts}::timestamptz, ${opts.after.id}::uuid)` : q``}
    ORDER BY t.created_at DESC, t.id DESC
    LIMIT ${opts.limit}`;
  return rows.map((r) => ({ ...r, fence_epoch: Number(r.fence_epoch) }));
}

export interface InboxRow {
  kind: 'clarification' | 'permission';
  id: string;
  task_id: string;
  task_title: string;
  session_id: string;
  created_at: string;
  expires_at: string | null;
  text: string | null;
  ancestor_ids: string[];
}

/**
 * A workspace's pending question bundles (not yet expired) and permission requests, oldest first,
 * with the task's title and its ancestors (root first). Fetches `limit` rows. Ancestors are walked
 * up at most 100 levels (deeper than KANDEV_MAX_DEPTH allows).
 */
export async function pendingInbox(q: Q, workspaceId: string, limit: number): Promise<InboxRow[]> {
  return q<InboxRow[]>`
    WITH items AS (
      SELECT 'clarification' AS kind, b.id, b.task_id, b.session_id, b.created_at, b.expires_at,
        (SELECT string_agg(cq.text, E'\n' ORDER BY cq.position) FROM clarification_questions cq
          WHERE cq.bundle_id = b.id AND cq.status = 'pending') AS text
      FROM clarification_bundles b
      WHERE b.workspace_id = ${workspaceId} AND b.status = 'pending' AND b.expires_at > now()
      UNION ALL
      SELECT 'permission', p.id, p.task_id, p.session_id, p.created_at, NULL::timestamptz, p.title
      FROM permission_requests p
      WHERE p.workspace_id = ${workspaceId} AND p.status = 'pending'
    )
    SELECT i.kind, i.id, i.task_id, t.title AS task_title, i.session_id, i.created_at, i.expires_at, i.text, anc.ids AS ancestor_ids
    FROM items i
    JOIN tasks t ON t.id = i.task_id
    CROSS JOIN LATERAL (
      WITH RECURSIVE up(id, parent_id, depth) AS (
        SELECT t.id, t.parent_id, 0
        UNION ALL
        SELECT p.id, p.parent_id, up.depth + 1 FROM tasks p JOIN up ON p.id = up.parent_id WHERE up.depth < 100
      )
      SELECT coalesce(array_agg(up.id ORDER BY up.depth DESC) FILTER (WHERE up.depth > 0), '{}')::text[] AS ids FROM up
    ) anc
    ORDER BY i.created_at, i.id
    LIMIT ${limit}`;
}

/**
 * Record the first use of a /ws ticket (ADR 0058): true when this call inserted its jti, false when
 * it was used before. Expired rows go in the same statement.
 */
export async function consumeWsTicket(q: Q, jti: string, operator: string, expiresAt: string): Promise<boolean> {
  const [row] = await q<{ first: boolean }[]>`
    WITH swept AS (DELETE FROM ws_ticket_uses WHERE expires_at < now() - interval '1 minute'),
      ins AS (INSERT INTO ws_ticket_uses (jti, operator, expires_at) VALUES (${jti}, ${operator}, ${expiresAt}::timestamptz)
        ON CONFLICT (jti) DO NOTHING RETURNING jti)
    SELECT EXISTS (SELECT 1 FROM ins) AS first`;
  return row?.first === true;
}
