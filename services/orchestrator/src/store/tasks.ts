import { randomUUID } from 'node:crypto';
import type { TaskStatus } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import { columns, columnsOf, SESSION_COLUMNS, TASK_COLUMNS, type SessionRow, type TaskRow } from './rows.js';

type Q = Sql | Tx;

export async function insertWorkspace(q: Q, name: string) {
  const [row] = await q<
    { id: string; name: string; created_at: string }[]
  >`INSERT INTO workspaces (id, name) VALUES (${randomUUID()}, ${name}) RETURNING id, name, created_at`;
  return row!;
}
export async function workspaceExists(q: Q, id: string): Promise<boolean> {
  return (await q`SELECT 1 FROM workspaces WHERE id = ${id}`).length > 0;
}

export async function insertTask(
  q: Q,
  t: {
    workspace_id: string;
    parent_id: string | null;
    title: string;
    description: string | null;
    office: boolean;
    agent: string | null;
    working_dir?: string | null;
  },
): Promise<TaskRow> {
  const [row] = await q<TaskRow[]>`
    INSERT INTO tasks (id, workspace_id, parent_id, title, description, office, agent, working_dir)
    VALUES (${randomUUID()}, ${t.workspace_id}, ${t.parent_id}, ${t.title}, ${t.description}, ${t.office}, ${t.agent}, ${t.working_dir ?? null})
    RETURNING ${columns(q, TASK_COLUMNS)}`;
  return norm(row!);
}

export async function getTask(q: Q, id: string): Promise<TaskRow | null> {
  const [row] = await q<TaskRow[]>`SELECT ${columns(q, TASK_COLUMNS)} FROM tasks WHERE id = ${id}`;
  return row ? norm(row) : null;
}

/**
 * The task's row lock: serialises launches, stops, admissions and holds of one task across
 * replicas. Every task lock is FOR NO KEY UPDATE (the lock an UPDATE of non-key columns takes), never
 * FOR UPDATE: foreign-key checks from rows that reference the task (sessions, child tasks) take
 * KEY SHARE locks, which this one does not block, so no such check can close a deadlock cycle.
 * Creating a child locks its parent FOR SHARE explicitly (lockParentForChild), which this blocks.
 */
export async function lockTask(tx: Tx, id: string): Promise<TaskRow | null> {
  const [row] = await tx<TaskRow[]>`SELECT ${columns(tx, TASK_COLUMNS)} FROM tasks WHERE id = ${id} FOR NO KEY UPDATE`;
  return row ? norm(row) : null;
}

/**
 * The task's row under a share lock: its status cannot change (an operator's PATCH, a tree cancel
 * take the row's update lock) until this transaction ends, while other share holders pass. Taken
 * before any session lock (task → session, ADR 0060).
 */
export async function shareTask(tx: Tx, id: string): Promise<TaskRow | null> {
  const [row] = await tx<TaskRow[]>`SELECT ${columns(tx, TASK_COLUMNS)} FROM tasks WHERE id = ${id} FOR SHARE`;
  return row ? norm(row) : null;
}

/**
 * The task's row lock, or null at once when another transaction holds it: for background work (the
 * reconciler) that must take the task before its session (the one lock order, ADR 0060) and must not
 * queue behind a control action in flight. It tries again next pass.
 */
export async function lockTaskIfFree(tx: Tx, id: string): Promise<TaskRow | null> {
  const [row] = await tx<TaskRow[]>`SELECT ${columns(tx, TASK_COLUMNS)} FROM tasks WHERE id = ${id} FOR NO KEY UPDATE SKIP LOCKED`;
  return row ? norm(row) : null;
}

/** B-1 inside a stop's transaction: bump the fence, which takes the task's row lock, and return the locked row. */
export async function bumpFenceLocked(tx: Tx, id: string): Promise<BumpedTask | null> {
  const [row] = await tx<TaskRow[]>`UPDATE tasks SET fence_epoch = fence_epoch + 1 WHERE id = ${id} RETURNING ${columns(tx, TASK_COLUMNS)}`;
  return row ? { task: norm(row) } : null;
}

/** A stop's fence bump: the task row it locked. */
export interface BumpedTask {
  task: TaskRow;
}

/** Tasks by id, as they are now (a stop's checks). */
export async function tasksByIds(q: Q, ids: readonly string[]): Promise<Map<string, TaskRow>> {
  const rows = await q<TaskRow[]>`SELECT ${columns(q, TASK_COLUMNS)} FROM tasks WHERE id = ANY(${[...ids]}::uuid[])`;
  return new Map(rows.map((r) => [r.id, norm(r)]));
}

/**
 * in SQL, for statements of a child stop that must change and lock nothing unless the caller
 * is the target's direct parent in its workspace: a condition on `t`, the target row.
 */
export const isCallersChild = (q: Q, targetId: string, callerId: string) =>
  q`t.id = ${targetId} AND t.parent_id = ${callerId} AND t.workspace_id = (SELECT c.workspace_id FROM tasks c WHERE c.id = ${callerId})`;

/** B-1 for a child stop: bump the target's fence (which takes its row lock) only if the caller is its direct parent; the locked row, or null. */
export async function bumpFenceOfChild(tx: Tx, targetId: string, callerId: string): Promise<BumpedTask | null> {
  const [row] = await tx<TaskRow[]>`
    UPDATE tasks t SET fence_epoch = t.fence_epoch + 1 WHERE ${isCallersChild(tx, targetId, callerId)} RETURNING ${columns(tx, TASK_COLUMNS)}`;
  return row ? { task: norm(row) } : null;
}

/**
 * A child is created under its parent's FOR SHARE lock: it conflicts with the lock a tree hold
 * takes on every member, so a child is either created before the hold locks its parent (and is
 * found by the hold's re-read) or waits until the hold has committed.
 */
export async function lockParentForChild(tx: Tx, id: string): Promise<TaskRow | null> {
  const [row] = await tx<TaskRow[]>`SELECT ${columns(tx, TASK_COLUMNS)} FROM tasks WHERE id = ${id} FOR SHARE`;
  return row ? norm(row) : null;
}

export async function updateTaskFields(
  tx: Tx,
  id: string,
  f: { title?: string; status?: TaskStatus; archived?: boolean; cancelled?: boolean },
): Promise<TaskRow> {
  const status = f.status ?? null;
  const archived = f.archived ?? null;
  const [row] = await tx<TaskRow[]>`
    UPDATE tasks SET
      title = COALESCE(${f.title ?? null}, title),
      status = COALESCE(${status}, status),
      archived_at = CASE WHEN ${archived}::boolean IS NULL THEN archived_at WHEN ${archived}::boolean THEN COALESCE(archived_at, now()) ELSE NULL END,
      cancelled_at = CASE WHEN ${status}::text = 'CANCELLED' THEN COALESCE(cancelled_at, now()) WHEN ${status}::text IS NOT NULL THEN NULL ELSE cancelled_at END,
      updated_at = now()
    WHERE id = ${id} RETURNING ${columns(tx, TASK_COLUMNS)}`;
  return norm(row!);
}

const norm = (r: TaskRow): TaskRow => ({ ...r, fence_epoch: Number(r.fence_epoch) });

/**
 * A task and its sessions (oldest first) in one statement, so one snapshot: the task's status and
 * its sessions' states agree, for one round trip instead of a read-only transaction's five (BEGIN,
 * its bounds, two reads, COMMIT). A row per session, its columns renamed `s_*`; a task without
 * sessions gives one row whose session columns are null.
 */
export async function taskWithSessions(q: Q, id: string): Promise<{ task: TaskRow; sessions: SessionRow[] } | null> {
  const rows = await q<Array<Record<string, unknown>>>`
    SELECT ${columns(q, TASK_COLUMNS, 't')}, ${columns(q, SESSION_COLUMNS, 's', 's_')}
      FROM tasks t LEFT JOIN sessions s ON s.task_id = t.id
     WHERE t.id = ${id}
     ORDER BY s.created_at, s.id`;
  const [first] = rows;
  if (!first) return null;
  return {
    task: norm(columnsOf<TaskRow>(TASK_COLUMNS, first)),
    sessions: rows.filter((r) => r.s_id !== null).map((r) => columnsOf<SessionRow>(SESSION_COLUMNS, r, 's_')),
  };
}

/** A task and its ancestors, root first. */
export async function lineageOf(q: Q, id: string): Promise<Array<{ id: string; workspace_id: string; parent_id: string | null }>> {
  return q<Array<{ id: string; workspace_id: string; parent_id: string | null }>>`
    WITH RECURSIVE up AS (
      SELECT id, workspace_id, parent_id, 0 AS n FROM tasks WHERE id = ${id}
      UNION ALL
      SELECT t.id, t.workspace_id, t.parent_id, up.n + 1 FROM tasks t JOIN up ON t.id = up.parent_id
    ) SELECT id, workspace_id, parent_id FROM up ORDER BY n DESC`;
}
