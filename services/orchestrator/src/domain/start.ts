import { conflict, skipReasonOf, WakeupSkipReasons, type HoldMode, type KandevError, type SessionState, type TaskStatus } from '@kandev/contracts';

/**
 * The one rule for "may this task get a session now?" (R-10.1, B-1, issue #54). Every path that
 * starts a session asks it, under the task's row lock (flows/sessions.ts `startSession`): operator
 * start, wakeup dispatch, message delivery to a child with no session, create_task_kandev,
 * spawn_session_kandev. A plain function of what the lock holder read, so it is tested on its own.
 *
 * Order matters: an archived task says so first; a held task names its hold (a tree cancel's
 * members are CANCELLED *and* held, and their wakeups say `tree_cancelled`, R-4.3); a CANCELLED task
 * gets nothing until an operator sets another status or a restore returns it; a start already in
 * flight is joined (starts of one task coalesce: at most one in flight, ADR 0060).
 */

/** Why a start is refused; for a wakeup it is also its `skip_reason`. */
export const StartRefusals = {
  archived: WakeupSkipReasons.taskArchived,
  cancelled: WakeupSkipReasons.taskCancelled,
  paused: skipReasonOf('pause'),
  treeCancelled: skipReasonOf('cancel'),
  sessionLive: 'session_live',
} as const;
export type StartRefusal = (typeof StartRefusals)[keyof typeof StartRefusals];

/**
 * What the asking path does when the task already has a live session: a wakeup joins it (the task
 * is already working; the wakeup is coalesced), a spawn refuses (R-11.1: any live session, one being
 * started included), an operator start opens another session beside it (non-primary, R-1.3). A
 * session being started is joined by every path but spawn.
 */
export type LiveSessionPolicy = 'join' | 'refuse' | 'another';

export interface StartFacts<S extends { id: string; state: SessionState }> {
  task: { status: TaskStatus; archived_at: string | null };
  /** The active hold the task is a member of, if any. */
  hold: { hold_id: string; mode: HoldMode } | null;
  /** The task's active sessions, oldest first. */
  live: readonly S[];
}

export type StartVerdict<S> =
  { kind: 'start' } | { kind: 'join'; session: S } | { kind: 'refuse'; reason: StartRefusal; message: string; details: Record<string, unknown> };

export function sessionStartVerdict<S extends { id: string; state: SessionState }>(facts: StartFacts<S>, policy: LiveSessionPolicy): StartVerdict<S> {
  const refuse = (reason: StartRefusal, message: string, details: Record<string, unknown> = {}) =>
    ({ kind: 'refuse', reason, message, details: { ...details, reason } }) as const;
  if (facts.task.archived_at) return refuse(StartRefusals.archived, 'task is archived');
  if (facts.hold) {
    const { hold_id, mode } = facts.hold;
    return refuse(skipReasonOf(mode), `task is held by a tree ${mode} hold`, { hold_id, hold_mode: mode });
  }
  if (facts.task.status === 'CANCELLED')
    return refuse(StartRefusals.cancelled, 'task is CANCELLED: it gets no new session until an operator sets another status or a restore returns it');
  // A start in flight is joined, except by a path that asked for none live (spawn): to it, a
  // STARTING session is as live as a RUNNING one.
  const starting = facts.live.find((s) => s.state === 'STARTING');
  if (starting && policy !== 'refuse') return { kind: 'join', session: starting };
  const newest = facts.live.at(-1);
  if (newest && policy === 'join') return { kind: 'join', session: newest };
  if (newest && policy === 'refuse') return refuse(StartRefusals.sessionLive, 'task already has a live session', { session_id: newest.id });
  return { kind: 'start' };
}

/**
 * The same rule on what can be read without the lock, for refusing early (before any write or
 * launch admission is asked). Only refusals are final here; the locked check decides the rest.
 */
export function earlyRefusal(facts: Pick<StartFacts<never>, 'task' | 'hold'>): Extract<StartVerdict<never>, { kind: 'refuse' }> | null {
  const v = sessionStartVerdict<never>({ ...facts, live: [] }, 'another');
  return v.kind === 'refuse' ? v : null;
}

/** A refused start as the caller sees it: CONFLICT, with the reason (and the hold) in details. */
export function refusalError(v: Extract<StartVerdict<unknown>, { kind: 'refuse' }>): KandevError {
  return conflict(v.message, v.details);
}

/**
 * The `skip_reason` of a wakeup whose start was refused (CONFLICT): the start rule's reason, or the
 * live-session cap's (R-11.2: the workspace is full, not the task refused); none for another refusal.
 */
export function wakeupSkipReason(details: Record<string, unknown> | undefined): string | undefined {
  if (typeof details?.reason === 'string') return details.reason;
  if (details?.limit === 'live_sessions_per_workspace') return WakeupSkipReasons.liveSessionLimit;
  return undefined;
}
