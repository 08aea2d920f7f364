import { ACTIVE_SESSION_STATES, type Hold, type HoldMember, type HoldMode, type TaskStatus } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import { columns, TASK_COLUMNS, type TaskRow } from './rows.js';

type Q = Sql | Tx;

export interface SubtreeTask extends TaskRow {
  depth: number;
}

/** `tree`: the ids of the root and every descendant, with their depth (0 = the root). */
const subtreeOf = (q: Q, rootId: string) => q`
  WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM tasks WHERE id = ${rootId}
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM tasks c JOIN tree ON c.parent_id = tree.id
  )`;

const norm = (r: SubtreeTask): SubtreeTask => ({ ...r, fence_epoch: Number(r.fence_epoch), depth: Number(r.depth) });

/** The root and every descendant at any depth, archived ones included, root first. */
export async function subtree(q: Q, rootId: string): Promise<SubtreeTask[]> {
  const rows = await q<SubtreeTask[]>`
    ${subtreeOf(q, rootId)} SELECT ${columns(q, TASK_COLUMNS, 't')}, tree.depth FROM tasks t JOIN tree ON tree.id = t.id ORDER BY tree.depth, t.created_at, t.id`;
  return rows.map(norm);
}

/**
 * The subtree under the row lock of every member, complete at the instant the locks are held
 * . A child is created under a FOR SHARE lock on its parent (lockParentForChild), which these
 * locks block; one that committed while the locks were being taken is found by the re-read, and the
 * loop locks it too. So no task that exists when this returns is missed, and none can be added
 * under a member until the transaction ends.
 */
export async function lockSubtree(tx: Tx, rootId: string): Promise<SubtreeTask[]> {
  for (;;) {
    const locked = (
      await tx<SubtreeTask[]>`
        ${subtreeOf(tx, rootId)} SELECT ${columns(tx, TASK_COLUMNS, 't')}, tree.depth FROM tasks t JOIN tree ON tree.id = t.id ORDER BY t.id FOR NO KEY UPDATE OF t`
    ).map(norm);
    const [again] = await tx<{ n: number }[]>`${subtreeOf(tx, rootId)} SELECT count(*)::int AS n FROM tree`;
    if (again!.n === locked.length) return locked.sort((a, b) => a.depth - b.depth || a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }
}

interface HoldRow extends Omit<Hold, 'members'> {
  request_id: string | null;
}
const HOLD_COLUMNS = [
  'id',
  'workspace_id',
  'root_task_id',
  'mode',
  'release_policy',
  'created_by',
  'reason',
  'created_at',
  'released_at',
  'released_by',
  'released_reason',
] as const;

async function membersOf(q: Q, holdId: string): Promise<HoldMember[]> {
  return q<HoldMember[]>`SELECT task_id, depth, task_status, skip_reason FROM tree_hold_members WHERE hold_id = ${holdId} ORDER BY depth, task_id`;
}

export async function getHold(q: Q, holdId: string): Promise<Hold | null> {
  const [row] = await q<HoldRow[]>`SELECT ${columns(q, HOLD_COLUMNS)} FROM tree_holds WHERE id = ${holdId}`;
  return row ? { ...row, members: await membersOf(q, holdId) } : null;
}

/**
 * The active hold one of these tasks is a member of, if any (a task is in at most one, R-4.8): of
 * several, the hold of the earliest task in `taskIds` (a subtree root first: its preview names the
 * hold nearest its root).
 */
export async function activeHoldOfTasks(
  q: Q,
  taskIds: readonly string[],
): Promise<{ hold_id: string; task_id: string; mode: HoldMode; root_task_id: string } | null> {
  const [row] = await q<{ hold_id: string; task_id: string; mode: HoldMode; root_task_id: string }[]>`
    SELECT m.hold_id, m.task_id, h.mode, h.root_task_id FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
    WHERE m.task_id = ANY(${[...taskIds]}::uuid[]) AND m.active
    ORDER BY array_position(${[...taskIds]}::uuid[], m.task_id) LIMIT 1`;
  return row ?? null;
}

/** The active hold of this mode rooted at this task, under its row lock. */
export async function lockActiveHoldRootedAt(tx: Tx, rootId: string, mode: HoldMode): Promise<Hold | null> {
  const [row] = await tx<HoldRow[]>`
    SELECT ${columns(tx, HOLD_COLUMNS)} FROM tree_holds WHERE root_task_id = ${rootId} AND mode = ${mode} AND released_at IS NULL FOR UPDATE`;
  return row ? { ...row, members: await membersOf(tx, row.id) } : null;
}

export async function insertHold(
  tx: Tx,
  h: { id: string; workspace_id: string; root_task_id: string; mode: HoldMode; created_by: string; reason: string | null; request_id: string | null },
  members: readonly HoldMember[],
): Promise<Hold> {
  const [row] = await tx<HoldRow[]>`
    INSERT INTO tree_holds (id, workspace_id, root_task_id, mode, created_by, reason, request_id)
    VALUES (${h.id}, ${h.workspace_id}, ${h.root_task_id}, ${h.mode}, ${h.created_by}, ${h.reason}, ${h.request_id})
    RETURNING ${columns(tx, HOLD_COLUMNS)}`;
  // The unique index on active memberships is what makes "at most one active hold" hold under any race.
  await tx`INSERT INTO tree_hold_members (hold_id, task_id, depth, task_status, skip_reason)
           SELECT ${h.id}::uuid, m.task_id, m.depth, m.task_status, m.skip_reason
           FROM jsonb_to_recordset(${tx.json(members as never)}) AS m(task_id uuid, depth int, task_status text, skip_reason text)`;
  // The order every read of a hold's members has (membersOf).
  return { ...row!, members: [...members].sort((a, b) => a.depth - b.depth || (a.task_id < b.task_id ? -1 : a.task_id > b.task_id ? 1 : 0)) };
}

export async function releaseHold(tx: Tx, holdId: string, by: string, reason: string | null): Promise<Hold> {
  await tx`UPDATE tree_hold_members SET active = false WHERE hold_id = ${holdId}`;
  const [row] = await tx<HoldRow[]>`
    UPDATE tree_holds SET released_at = now(), released_by = ${by}, released_reason = ${reason} WHERE id = ${holdId} RETURNING ${columns(tx, HOLD_COLUMNS)}`;
  return { ...row!, members: await membersOf(tx, holdId) };
}

/** B-1 for a whole tree: every member's launch fence moves, so a launch in flight is refused when it registers. */
export async function bumpFences(tx: Tx, taskIds: readonly string[]): Promise<void> {
  await tx`UPDATE tasks SET fence_epoch = fence_epoch + 1 WHERE id = ANY(${[...taskIds]}::uuid[])`;
}

/** members (already locked) become CANCELLED with cancelled_at; execution locks cleared on every member. */
export async function cancelTasks(tx: Tx, taskIds: readonly string[]): Promise<TaskRow[]> {
  await tx`UPDATE tasks SET checkout_agent_id = NULL, checkout_at = NULL WHERE id = ANY(${[...taskIds]}::uuid[]) AND (checkout_agent_id IS NOT NULL OR checkout_at IS NOT NULL)`;
  const rows = await tx<TaskRow[]>`
    UPDATE tasks SET status = 'CANCELLED', cancelled_at = now(), updated_at = now()
    WHERE id = ANY(${[...taskIds]}::uuid[]) AND status <> 'CANCELLED' RETURNING ${columns(tx, TASK_COLUMNS)}`;
  return rows.map((r) => ({ ...r, fence_epoch: Number(r.fence_epoch) }));
}

/** members (already locked) return to their snapshot status; cancelled_at goes with CANCELLED. */
export async function restoreTasks(tx: Tx, snapshots: ReadonlyArray<{ task_id: string; task_status: TaskStatus }>): Promise<TaskRow[]> {
  if (!snapshots.length) return [];
  const rows = await tx<TaskRow[]>`
    UPDATE tasks t SET status = s.task_status,
      cancelled_at = CASE WHEN s.task_status = 'CANCELLED' THEN t.cancelled_at ELSE NULL END, updated_at = now()
    FROM jsonb_to_recordset(${tx.json(snapshots as never)}) AS s(task_id uuid, task_status text)
    WHERE t.id = s.task_id AND t.status IS DISTINCT FROM s.task_status
    RETURNING ${columns(tx, TASK_COLUMNS, 't')}`;
  return rows.map((r) => ({ ...r, fence_epoch: Number(r.fence_epoch) }));
}

/** Member tasks under their row locks, in id order (the same order a new hold locks them in). */
export async function lockTasks(tx: Tx, ids: readonly string[]): Promise<TaskRow[]> {
  const rows = await tx<TaskRow[]>`SELECT ${columns(tx, TASK_COLUMNS)} FROM tasks WHERE id = ANY(${[...ids]}::uuid[]) ORDER BY id FOR NO KEY UPDATE`;
  return rows.map((r) => ({ ...r, fence_epoch: Number(r.fence_epoch) }));
}

/** Member tasks (already locked) with no active session, as they are now, in id order. */
export async function tasksWithoutActiveSession(tx: Tx, ids: readonly string[]): Promise<TaskRow[]> {
  if (!ids.length) return [];
  const rows = await tx<TaskRow[]>`
    SELECT ${columns(tx, TASK_COLUMNS, 't')} FROM tasks t
    WHERE t.id = ANY(${[...ids]}::uuid[]) AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.task_id = t.id AND s.state = ANY(${[...ACTIVE_SESSION_STATES]}))
    ORDER BY t.id`;
  return rows.map((r) => ({ ...r, fence_epoch: Number(r.fence_epoch) }));
}

/** The hold a launch must respect (B-1): the active hold of this task, if any. */
export async function activeHoldOfTask(q: Q, taskId: string): Promise<{ hold_id: string; mode: HoldMode } | null> {
  const held = await activeHoldOfTasks(q, [taskId]);
  return held ? { hold_id: held.hold_id, mode: held.mode } : null;
}
