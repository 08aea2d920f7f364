import { ACTIVE_SESSION_STATES, type ChildSummary } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

type Q = Sql | Tx;
const ACTIVE = [...ACTIVE_SESSION_STATES];

/**
 * list_tasks_kandev: the direct children of `parentId` in its workspace, oldest first, each
 * with its newest active session, its active hold and what it waits on the operator for. One
 * statement (one snapshot), bounded by the children cap (KANDEV_MAX_CHILDREN) and `limit`.
 */
export async function childrenOf(q: Q, parentId: string, limit: number): Promise<ChildSummary[]> {
  const rows = await q<Array<ChildSummary & { session: ChildSummary['session']; hold: ChildSummary['hold'] }>>`
    SELECT t.id, t.title, t.status,
        (SELECT json_build_object('id', s.id, 'state', s.state) FROM sessions s
          WHERE s.task_id = t.id AND s.state = ANY(${ACTIVE}::text[]) ORDER BY s.created_at DESC, s.id DESC LIMIT 1) AS session,
        (SELECT json_build_object('id', h.id, 'mode', h.mode) FROM tree_hold_members m JOIN tree_holds h ON h.id = m.hold_id
          WHERE m.task_id = t.id AND m.active LIMIT 1) AS hold,
        (SELECT count(*) FROM clarification_bundles b JOIN clarification_questions cq ON cq.bundle_id = b.id
          WHERE b.task_id = t.id AND b.status = 'pending' AND cq.status = 'pending')::int AS pending_questions,
        (SELECT count(*) FROM permission_requests p WHERE p.task_id = t.id AND p.status = 'pending')::int AS pending_permissions
       FROM tasks t
      WHERE t.parent_id = ${parentId} AND t.workspace_id = (SELECT c.workspace_id FROM tasks c WHERE c.id = ${parentId})
      ORDER BY t.created_at, t.id
      LIMIT ${limit}`;
  return rows.map((r) => ({
    id: r.id,
    title: r.title,
    status: r.status,
    session: r.session,
    hold: r.hold,
    pending_questions: r.pending_questions,
    pending_permissions: r.pending_permissions,
  }));
}

/** The task's newest session (any state), or null. */
export async function latestSessionOf(q: Q, taskId: string): Promise<string | null> {
  const [row] = await q<Array<{ id: string }>>`SELECT id FROM sessions WHERE task_id = ${taskId} ORDER BY created_at DESC, id DESC LIMIT 1`;
  return row?.id ?? null;
}

/** The task's live (active) sessions, for spawn's "none live" rule; read under the task's row lock. */
export async function liveSessionsOf(q: Q, taskId: string): Promise<Array<{ id: string; state: string }>> {
  return q<Array<{ id: string; state: string }>>`SELECT id, state FROM sessions WHERE task_id = ${taskId} AND state = ANY(${ACTIVE}::text[])`;
}

/*
 * Limits. Each count is taken under a transaction-scoped advisory lock on what it counts
 * (a parent's children, a workspace's live sessions), so two concurrent creates or starts are
 * serialized on the count and cannot both pass the cap. The lock is taken as late as possible in
 * its transaction (just before the row it admits is written, or after it) and held to commit.
 */

/** Serialize the creates of children of one parent. */
export async function lockChildrenOf(tx: Tx, parentId: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended('kandev.children:' || ${parentId}::text, 0))`;
}

/** Children of a parent that count against its cap: every child not archived. */
export async function countChildren(q: Q, parentId: string): Promise<number> {
  const [row] = await q<Array<{ n: number }>>`SELECT count(*)::int AS n FROM tasks WHERE parent_id = ${parentId} AND archived_at IS NULL`;
  return row!.n;
}

/** Levels of the tree down to `taskId` (a root is level 1). */
export async function levelOf(q: Q, taskId: string): Promise<number> {
  const [row] = await q<Array<{ n: number }>>`
    WITH RECURSIVE up AS (
      SELECT id, parent_id, 1 AS n FROM tasks WHERE id = ${taskId}
      UNION ALL
      SELECT t.id, t.parent_id, up.n + 1 FROM tasks t JOIN up ON t.id = up.parent_id WHERE up.n < 1000
    ) SELECT max(n)::int AS n FROM up`;
  return row?.n ?? 0;
}

/** Serialize the session starts of one workspace, from here to commit. */
export async function lockLiveSessionsOf(tx: Tx, workspaceId: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended('kandev.live_sessions:' || ${workspaceId}::text, 0))`;
}

/** Active sessions of a workspace (the caller's own uncommitted ones included). */
export async function countLiveSessions(q: Q, workspaceId: string): Promise<number> {
  const [row] = await q<Array<{ n: number }>>`
    SELECT count(*)::int AS n FROM sessions s JOIN tasks t ON t.id = s.task_id WHERE t.workspace_id = ${workspaceId} AND s.state = ANY(${ACTIVE}::text[])`;
  return row!.n;
}

/** Pending question bundles of a session (read under the session's row lock, which every ask takes). */
export async function countPendingBundles(q: Q, sessionId: string): Promise<number> {
  const [row] = await q<Array<{ n: number }>>`SELECT count(*)::int AS n FROM clarification_bundles WHERE session_id = ${sessionId} AND status = 'pending'`;
  return row!.n;
}
