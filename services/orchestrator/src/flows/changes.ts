import { TERMINAL_SESSION_STATES, type Actor, type SessionState, type TaskStatus } from '@kandev/contracts';
import type { Tx } from '@kandev/runtime';
import { hasActiveSession, setSessionState } from '../store/sessions.js';
import { lockTask, updateTaskFields } from '../store/tasks.js';
import { toSession, toTask, type SessionRow, type TaskRow } from '../store/rows.js';
import type { Emit } from './context.js';

/** Every session state change goes through here, so each one publishes its event. */
export async function changeSessionState(
  tx: Tx,
  emit: Emit,
  task: { id: string; workspace_id: string },
  session: SessionRow,
  to: SessionState,
  opts: { reason?: string | null; error_message?: string | null; cancel_reason?: string | null; actor?: Actor | null } = {},
): Promise<SessionRow> {
  const terminal = TERMINAL_SESSION_STATES.includes(to);
  const updated = await setSessionState(tx, session.id, to, {
    ...(opts.error_message !== undefined ? { error_message: opts.error_message } : {}),
    cancel_reason: opts.cancel_reason ?? null,
    terminal,
  });
  await emit(
    'session.state_changed',
    { workspace_id: task.workspace_id, task_id: task.id, session_id: session.id, actor: opts.actor ?? null },
    { session: toSession(updated), from: session.state, to, reason: opts.reason ?? null },
  );
  return updated;
}

/**
 * a turn of the session ended cancelled (a cancel, an interrupt, or the agent runtime on its
 * own) and this transaction records it. The event is staged with those writes, so it is published
 * only once they are committed: a client that reads the session when it arrives finds the turn
 * closed and the session waiting for input. A stop's teardown, which cancels the turn of a session
 * it ends, is reported by the session's own CANCELLED instead.
 */
export function emitAgentCancelled(
  emit: Emit,
  scope: { workspace_id: string; task_id: string; session_id: string },
  executionId: string,
  turnId: string,
  actor: Actor | null = null,
): Promise<void> {
  return emit('session.agent.cancelled', { ...scope, actor }, { execution_id: executionId, turn_id: turnId, stop_reason: 'cancelled' });
}

/** Every task status change goes through here, so each one publishes its event. */
export async function changeTaskStatus(
  tx: Tx,
  emit: Emit,
  task: TaskRow,
  to: TaskStatus,
  opts: { reason?: string | null; actor?: Actor | null } = {},
): Promise<TaskRow> {
  if (task.status === to) return task;
  const updated = await updateTaskFields(tx, task.id, { status: to });
  await emit(
    'task.state_changed',
    { workspace_id: task.workspace_id, task_id: task.id, actor: opts.actor ?? null },
    { task: toTask(updated), from: task.status, to, reason: opts.reason ?? null },
  );
  return updated;
}

/**
 * The last active session of a task ended on its own (the agent exited, died or was lost): an
 * IN_PROGRESS task would otherwise say so with nothing running. It goes to REVIEW, as
 * after a stop: someone should look at what the agent left. Office-managed and archived
 * tasks are left to their own paths. Call with the task's row lock taken before the session's guard:
 * task → session is the one lock order (ADR 0060; the opposite order deadlocked a failed launch's
 * repair against the report of its execution's end).
 */
export async function reviewTaskIfNothingActive(tx: Tx, emit: Emit, taskId: string, reason: string): Promise<void> {
  const task = await lockTask(tx, taskId);
  if (!task || task.status !== 'IN_PROGRESS' || task.archived_at !== null || task.office) return;
  if (await hasActiveSession(tx, taskId)) return;
  await changeTaskStatus(tx, emit, task, 'REVIEW', { reason });
}
