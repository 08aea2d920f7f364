import { randomUUID } from 'node:crypto';
import { ACTIVE_SESSION_STATES, type SessionState } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import { columns, columnsOf, SESSION_COLUMNS, type SessionRow, type Turn } from './rows.js';
import { isCallersChild } from './tasks.js';

type Q = Sql | Tx;

export async function insertSession(
  tx: Tx,
  s: { task_id: string; agent: string; state: SessionState; is_primary: boolean; launch_key?: string | null },
): Promise<SessionRow> {
  // across sessions: a queue an operator cancel paused stays paused for the task's next
  // session (the queue is the task's, R-1.6) until the operator resumes it.
  const [row] = await tx<SessionRow[]>`
    INSERT INTO sessions (id, task_id, state, is_primary, agent, started_at, launch_key, queue_paused)
    VALUES (${randomUUID()}, ${s.task_id}, ${s.state}, ${s.is_primary}, ${s.agent}, now(), ${s.launch_key ?? null},
            COALESCE((SELECT queue_paused FROM sessions WHERE task_id = ${s.task_id} ORDER BY created_at DESC LIMIT 1), false))
    RETURNING ${columns(tx, SESSION_COLUMNS)}`;
  return row!;
}

/** The session a keyed launch (a wakeup dispatch) already started, if any. */
export async function sessionByLaunchKey(q: Q, key: string): Promise<SessionRow | null> {
  const [row] = await q<SessionRow[]>`SELECT ${columns(q, SESSION_COLUMNS)} FROM sessions WHERE launch_key = ${key}`;
  return row ?? null;
}

export async function getSession(q: Q, id: string): Promise<SessionRow | null> {
  const [row] = await q<SessionRow[]>`SELECT ${columns(q, SESSION_COLUMNS)} FROM sessions WHERE id = ${id}`;
  return row ?? null;
}

/**
 * A session, its task's workspace and its turns (oldest first) in one statement, so one snapshot:
 * a turn never reads finished while its session still reads RUNNING, and a read costs one round
 * trip instead of a transaction's six (BEGIN, its bounds, three reads, COMMIT). A row per turn (a session
 * with none gives one row whose turn columns are null).
 */
export async function sessionWithTurns(q: Q, id: string): Promise<{ session: SessionRow; workspace_id: string; turns: Turn[] } | null> {
  const rows = await q<
    Array<
      SessionRow & { workspace_id: string; turn_id: string | null; turn_started_at: string; turn_completed_at: string | null; turn_stop_reason: string | null }
    >
  >`
    SELECT ${columns(q, SESSION_COLUMNS, 's')}, t.workspace_id,
           u.id AS turn_id, u.started_at AS turn_started_at, u.completed_at AS turn_completed_at, u.stop_reason AS turn_stop_reason
      FROM sessions s JOIN tasks t ON t.id = s.task_id LEFT JOIN turns u ON u.session_id = s.id
     WHERE s.id = ${id}
     ORDER BY u.started_at, u.id`;
  const [first] = rows;
  if (!first) return null;
  const session = columnsOf<SessionRow>(SESSION_COLUMNS, first);
  const turns = rows
    .filter((r) => r.turn_id !== null)
    .map((r) => ({ id: r.turn_id!, started_at: r.turn_started_at, completed_at: r.turn_completed_at, stop_reason: r.turn_stop_reason }));
  return { session, workspace_id: first.workspace_id, turns };
}

/**
 * The per-session guard (DESIGN "MCP stop"): a row lock, so it holds across orchestrator replicas.
 * Every session lock is FOR NO KEY UPDATE, never FOR UPDATE, for the reason the task locks are
 * (store/tasks.ts): a guard excludes every other guard, but the foreign-key checks of rows that only
 * reference the session (turns, transcript items, bundles) take KEY SHARE and pass. Under FOR UPDATE
 * the transcript consumer, holding the session's transcript_state row, waited on a guard whose
 * holder waited on transcript_state: a deadlock, answered INTERNAL_ERROR (test/session-guard.test.ts).
 */
export async function lockSession(tx: Tx, id: string): Promise<SessionRow | null> {
  const [row] = await tx<SessionRow[]>`SELECT ${columns(tx, SESSION_COLUMNS)} FROM sessions WHERE id = ${id} FOR NO KEY UPDATE`;
  return row ?? null;
}

/**
 * The per-session guard, or null at once when another transaction holds it (a control action in
 * flight): for background work that must not queue behind it (the reconciler tries again next pass).
 */
export async function lockSessionIfFree(tx: Tx, id: string): Promise<SessionRow | null> {
  const [row] = await tx<SessionRow[]>`SELECT ${columns(tx, SESSION_COLUMNS)} FROM sessions WHERE id = ${id} FOR NO KEY UPDATE SKIP LOCKED`;
  return row ?? null;
}

/** A session under its guard, with its task's workspace and its open turn. */
export type GuardedSession = SessionRow & { workspace_id: string; open_turn_id: string | null };

/**
 * The per-session guard plus the session's workspace and open turn (the hot path of a cancel and of
 * an agent's question). Two statements, the read issued only once the lock is granted (ADR 0033):
 * under READ COMMITTED a statement reads a snapshot taken when it starts, so a turn read by the
 * locking statement itself would miss a turn whose prompt committed while we waited for the lock (a
 * prompt dispatch holds this lock while the agent already runs the new turn). The read sees it.
 */
export async function lockSessionWithOpenTurn(tx: Tx, id: string): Promise<GuardedSession | null> {
  const locked = await lockSession(tx, id);
  if (!locked) return null;
  const [extra] = await tx<{ workspace_id: string; open_turn_id: string | null }[]>`
    SELECT t.workspace_id,
      (SELECT tu.id FROM turns tu WHERE tu.session_id = s.id AND tu.completed_at IS NULL ORDER BY tu.started_at DESC LIMIT 1) AS open_turn_id
    FROM sessions s JOIN tasks t ON t.id = s.task_id WHERE s.id = ${id}`;
  return extra ? { ...locked, ...extra } : null;
}

/**
 * The session a task's agent asks from when its token names no session: lock the task's active
 * sessions (in the stop pipeline's order), then, in a statement that starts after the locks are
 * granted, pick the one whose turn is in flight. Reading first and locking after would answer "no
 * turn" to an agent that asks within the prompt dispatch that started its turn.
 */
export async function lockSessionAskingFor(tx: Tx, taskId: string): Promise<GuardedSession | null> {
  const active = [...ACTIVE_SESSION_STATES];
  // The locks awaited before the read is issued (ADR 0033).
  await tx`SELECT id FROM sessions WHERE task_id = ${taskId} AND state = ANY(${active}) ORDER BY created_at, id FOR NO KEY UPDATE`;
  const [row] = await tx<GuardedSession[]>`
    SELECT ${columns(tx, SESSION_COLUMNS, 's')}, t.workspace_id, tu.id AS open_turn_id
    FROM sessions s JOIN tasks t ON t.id = s.task_id JOIN turns tu ON tu.session_id = s.id
    WHERE s.task_id = ${taskId} AND s.state = ANY(${active}) AND tu.completed_at IS NULL ORDER BY tu.started_at DESC LIMIT 1`;
  return row ?? null;
}

/** Candidates of a stop: sessions in an active state, in a stable order. */
export async function activeSessionsOfTask(q: Q, taskId: string): Promise<SessionRow[]> {
  return q<SessionRow[]>`
    SELECT ${columns(q, SESSION_COLUMNS)} FROM sessions WHERE task_id = ${taskId} AND state = ANY(${[...ACTIVE_SESSION_STATES]}) ORDER BY created_at, id`;
}

/** The states of every session of a task (R-1.4 asks whether another one is still working). */
export async function sessionStatesOfTask(q: Q, taskId: string): Promise<SessionState[]> {
  return (await q<{ state: SessionState }[]>`SELECT state FROM sessions WHERE task_id = ${taskId}`).map((r) => r.state);
}

/** Whether any session of the task is active (ACTIVE_SESSION_STATES). */
export async function hasActiveSession(q: Q, taskId: string): Promise<boolean> {
  const rows = await q`SELECT 1 FROM sessions WHERE task_id = ${taskId} AND state = ANY(${[...ACTIVE_SESSION_STATES]}) LIMIT 1`;
  return rows.length > 0;
}

export async function hasPrimarySession(q: Q, taskId: string): Promise<boolean> {
  return (await q`SELECT 1 FROM sessions WHERE task_id = ${taskId} AND is_primary`).length > 0;
}

export async function setSessionState(
  tx: Tx,
  id: string,
  state: SessionState,
  extra: { error_message?: string | null; cancel_reason?: string | null; terminal?: boolean } = {},
): Promise<SessionRow> {
  const [row] = await tx<SessionRow[]>`
    UPDATE sessions SET state = ${state},
      error_message = CASE WHEN ${extra.error_message !== undefined}::boolean THEN ${extra.error_message ?? null} ELSE error_message END,
      cancel_reason = COALESCE(${extra.cancel_reason ?? null}, cancel_reason),
      completed_at = CASE WHEN ${extra.terminal ?? false}::boolean THEN COALESCE(completed_at, now()) ELSE completed_at END,
      updated_at = now()
    WHERE id = ${id} RETURNING ${columns(tx, SESSION_COLUMNS)}`;
  return row!;
}

export async function attachExecution(tx: Tx, id: string, executionId: string, instanceId: string | null): Promise<void> {
  await tx`UPDATE sessions SET execution_id = ${executionId}, instance_id = COALESCE(${instanceId}, instance_id) WHERE id = ${id}`;
}

export async function setQueuePaused(tx: Tx, id: string, paused: boolean): Promise<void> {
  await tx`UPDATE sessions SET queue_paused = ${paused} WHERE id = ${id}`;
}

/** resume: every session of the task runs its queue again (the newest one is what a next session inherits). */
export async function resumeQueueOfTask(tx: Tx, taskId: string): Promise<void> {
  await tx`UPDATE sessions SET queue_paused = false WHERE task_id = ${taskId} AND queue_paused`;
}

/** Active sessions of many tasks under their guard (a tree hold stops them all in one transaction). */
export async function lockActiveSessionsOfTasks(tx: Tx, taskIds: readonly string[]): Promise<SessionRow[]> {
  if (!taskIds.length) return [];
  return tx<SessionRow[]>`
    SELECT ${columns(tx, SESSION_COLUMNS)} FROM sessions WHERE task_id = ANY(${[...taskIds]}::uuid[]) AND state = ANY(${[...ACTIVE_SESSION_STATES]})
    ORDER BY id FOR NO KEY UPDATE`;
}

/** The per-session guard of a child stop: the target's active sessions, locked, only if the caller is its direct parent. */
export async function lockActiveSessionsOfChild(tx: Tx, targetId: string, callerId: string): Promise<SessionRow[]> {
  return tx<SessionRow[]>`
    SELECT ${columns(tx, SESSION_COLUMNS)} FROM sessions
    WHERE task_id = ${targetId} AND state = ANY(${[...ACTIVE_SESSION_STATES]}) AND EXISTS (SELECT 1 FROM tasks t WHERE ${isCallersChild(tx, targetId, callerId)})
    ORDER BY id FOR NO KEY UPDATE`;
}

/** Write CANCELLED with a fixed reason on sessions already locked and checked active, in one statement. */
export async function cancelSessions(tx: Tx, ids: readonly string[], cancelReason: string): Promise<SessionRow[]> {
  if (!ids.length) return [];
  return tx<SessionRow[]>`
    UPDATE sessions SET state = 'CANCELLED', cancel_reason = ${cancelReason}, completed_at = COALESCE(completed_at, now()), updated_at = now()
    WHERE id = ANY(${[...ids]}::uuid[]) RETURNING ${columns(tx, SESSION_COLUMNS)}`;
}

/**
 * A session this transaction just stopped, and the turn the stop closed, stamped with the clock's
 * time now rather than the transaction's start (an escalated cancel waited out its timeout inside
 * the transaction: R-10.5's bound runs from the logical cancel). The row as stamped.
 */
export async function stampStoppedNow(tx: Tx, id: string): Promise<SessionRow> {
  const [row] = await tx<SessionRow[]>`
    WITH ts AS (SELECT clock_timestamp() AS at),
      closed AS (UPDATE turns SET completed_at = (SELECT at FROM ts) WHERE session_id = ${id} AND completed_at = now() AND stop_reason = 'cancelled')
    UPDATE sessions SET completed_at = (SELECT at FROM ts), updated_at = (SELECT at FROM ts) WHERE id = ${id} RETURNING ${columns(tx, SESSION_COLUMNS)}`;
  return row!;
}
