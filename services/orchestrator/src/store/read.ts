import { ACTIVE_SESSION_STATES, type HoldMode, type TaskStatus, type Workspace } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import type { SortKey } from '../domain/paging.js';
import { qualified, TASK_COLUMNS, type TaskRow } from './rows.js';

type Q = Sql | Tx;

/** Columns of a listed row's sort key: created_at at full precision (the ISO form the driver gives is cut to milliseconds). */
const SORT_TS = `created_at::text AS sort_ts`;

export interface WorkspaceListRow extends Workspace {
  sort_ts: string;
}

/** Workspaces newest first after `after`; `ids` null = every workspace. Fetches `limit` rows. */
export async function listWorkspaces(q: Q, opts: { ids: string[] | null; after: SortKey | null; limit: number }): Promise<WorkspaceListRow[]> {
  return q<WorkspaceListRow[]>`
    SELECT id, name, created_at, ${q.unsafe(SORT_TS)} FROM workspaces
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

const prefixed = qualified(TASK_COLUMNS, 't');

/**
 * Tasks of one workspace, newest first after `after`, with what a board card shows: direct child
 * count, active sessions, the active hold. Each filter shape has an index that yields rows in this
 * order (migrations/006), so a page reads about `limit` index entries plus three index probes a row.
 */
export async function listTasks(q: Q, f: TaskListFilter, opts: { after: SortKey | null; limit: number }): Promise<TaskListRow[]> {
  const rows = await q<TaskListRow[]>`
    SELECT ${q.unsafe(prefixed)}, t.created_at::text AS sort_ts,
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
