import { isWorkingSession, type SessionState, type TaskStatus } from '@kandev/contracts';

export interface ReviewCandidate {
  status: TaskStatus;
  archived_at: string | null;
  office: boolean;
}

/**
 * after an accepted stop the task moves to REVIEW only if it is IN_PROGRESS or
 * SCHEDULING, not archived, not office-managed, and none of its other sessions still works.
 */
export function mayMoveToReview(task: ReviewCandidate, otherSessionStates: readonly SessionState[]): boolean {
  if (task.status !== 'IN_PROGRESS' && task.status !== 'SCHEDULING') return false;
  if (task.archived_at !== null || task.office) return false;
  return !otherSessionStates.some(isWorkingSession);
}

/** A task gets IN_PROGRESS when a session starts, unless it is already there or terminally held. */
export function statusOnSessionStart(current: TaskStatus): TaskStatus | null {
  return current === 'IN_PROGRESS' ? null : 'IN_PROGRESS';
}

/**
 * After a failed launch the task returns to the status it had before the start moved it to
 * IN_PROGRESS; not when it has moved on meanwhile or another session is still active.
 */
export function statusAfterFailedLaunch(current: TaskStatus, previous: TaskStatus, otherActiveSessions: number): TaskStatus | null {
  if (current !== 'IN_PROGRESS' || otherActiveSessions > 0 || previous === 'IN_PROGRESS') return null;
  return previous;
}

/**
 * Reconciler repair: a task IN_PROGRESS with no active session (a launch or execution lost without
 * a transition) goes to REVIEW, like a stopped task (R-1.4: not archived or office-managed ones,
 * whose status their owner decides), once it has been so for the configured bound.
 */
export function statusOfStalledTask(task: ReviewCandidate, activeSessions: number): TaskStatus | null {
  return task.status === 'IN_PROGRESS' && activeSessions === 0 && mayMoveToReview(task, []) ? 'REVIEW' : null;
}

/** Session state when a turn ends on an execution that stays up (READY). */
export function sessionStateAfterTurn(current: SessionState): SessionState | null {
  return current === 'RUNNING' || current === 'STARTING' ? 'WAITING_FOR_INPUT' : null;
}

export type ExecutionEnd = 'graceful' | 'killed' | 'exited' | 'lost';

/** What an active session becomes when its execution is gone without a stop having cancelled it. */
export function sessionStateAfterExecutionEnd(
  how: ExecutionEnd,
  exitCode: number | null,
  reason?: string | null,
): { state: SessionState; error: string | null } {
  const why = reason ? ` (${reason})` : '';
  if (how === 'exited' && exitCode === 0) return { state: 'COMPLETED', error: null };
  if (how === 'exited') return { state: 'FAILED', error: `agent exited with code ${exitCode ?? 'unknown'}${why}` };
  if (how === 'lost') return { state: 'FAILED', error: 'agent execution was lost with its lifecycle instance' };
  // An active session means no stop was accepted: the execution ended without anyone asking.
  if (how === 'killed') return { state: 'FAILED', error: `agent execution was killed${why}` };
  return { state: 'FAILED', error: `agent execution ended unexpectedly${why}` };
}

/**
 * How the open turns of a session end when its execution does. A session still active means no
 * stop or cancel was accepted for it: the turn did not get cancelled, it died with the process.
 */
export function turnEndAfterExecutionEnd(sessionStillActive: boolean): 'error' | 'cancelled' {
  return sessionStillActive ? 'error' : 'cancelled';
}
