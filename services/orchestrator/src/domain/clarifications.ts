import {
  conflict,
  notFound,
  validationError,
  type Answer,
  type ClarificationBundle,
  type ClarificationBundleView,
  type QuestionAsked,
  type QuestionStatus,
} from '@kandev/contracts';

/*
 * The rules of clarification bundles, as plain functions over the bundle row and the
 * facts the store derives for it (lease validity by the database clock, the turn's state).
 */

export type BundleStatus = ClarificationBundle['status'];
export type Question = ClarificationBundle['questions'][number];

/** A bundle row plus the facts that decide who, if anyone, is still waiting on it. */
export interface BundleFacts {
  id: string;
  task_id: string;
  workspace_id: string;
  session_id: string;
  turn_id: string | null;
  status: BundleStatus;
  reason: string | null;
  created_at: string;
  expires_at: string;
  closed_at: string | null;
  detached_at: string | null;
  detached_reason: string | null;
  /** waiter_lease_until is still in the future (database clock). */
  lease_valid: boolean;
  /** The turn the agent asked in has not completed. */
  turn_open: boolean;
  /** The session has a newer turn than the bundle's: it accepted newer work. */
  superseded: boolean;
  questions: Question[];
}

/** Why a waiter is gone. Stored on the bundle once, and never cleared. */
export const DetachReasons = {
  turnCancelled: 'turn_cancelled',
  turnEnded: 'turn_ended',
  waiterLost: 'waiter_lost',
  /** The agent's MCP client cancelled the call or disconnected while it waited. */
  callerGone: 'caller_gone',
  superseded: 'superseded',
} as const;

export interface WaiterState {
  live: boolean;
  detached: boolean;
  detached_reason: string | null;
}

/**
 * Is a tool call still holding this bundle open? Detachment is sticky once recorded. A pending
 * bundle without a record is judged from the facts: a newer turn, a finished turn or a lapsed
 * lease each mean nobody will read an outcome any more.
 */
export function waiterOf(b: BundleFacts): WaiterState {
  if (b.detached_at) return { live: false, detached: true, detached_reason: b.detached_reason };
  if (b.status !== 'pending') return { live: false, detached: false, detached_reason: null };
  if (b.superseded) return { live: false, detached: true, detached_reason: DetachReasons.superseded };
  if (!b.turn_open) return { live: false, detached: true, detached_reason: DetachReasons.turnEnded };
  if (!b.lease_valid) return { live: false, detached: true, detached_reason: DetachReasons.waiterLost };
  return { live: true, detached: false, detached_reason: null };
}

/** The bundle an operator should see for its session: pending and from the session's newest turn. */
export const isActiveBundle = (b: Pick<BundleFacts, 'status' | 'superseded'>): boolean => b.status === 'pending' && !b.superseded;

/** The task's active bundle: the newest active one. `bundles` is newest first. */
export function pickActiveBundle<B extends Pick<BundleFacts, 'status' | 'superseded'>>(bundles: readonly B[]): B | null {
  return bundles.find(isActiveBundle) ?? null;
}

export function viewOf(b: BundleFacts): ClarificationBundleView {
  const w = waiterOf(b);
  return {
    id: b.id,
    task_id: b.task_id,
    workspace_id: b.workspace_id,
    session_id: b.session_id,
    turn_id: b.turn_id,
    status: b.status,
    questions: b.questions,
    created_at: b.created_at,
    expires_at: b.expires_at,
    closed_at: b.closed_at,
    reason: b.reason,
    waiter_live: w.live,
    detached: w.detached,
    detached_reason: w.detached_reason,
    superseded: b.superseded,
    active: isActiveBundle(b),
    agent_resumed: b.status === 'pending' ? null : !w.detached,
  };
}

/** The pinned public shape, as events carry it. */
export function pinnedOf(v: ClarificationBundleView): ClarificationBundle {
  return { id: v.id, task_id: v.task_id, session_id: v.session_id, turn_id: v.turn_id, status: v.status, questions: v.questions, created_at: v.created_at };
}

/** Questions as asked: ids default to `q<position>`, and must be unique within the bundle. */
export function questionsAsked(asked: readonly QuestionAsked[]): Question[] {
  const seen = new Set<string>();
  return asked.map((q, i) => {
    const id = q.id ?? `q${i + 1}`;
    if (seen.has(id)) throw validationError(`question id ${id} is used twice`, { question_id: id });
    seen.add(id);
    return { id, text: q.text, options: q.options ?? null, status: 'pending' as const, answer: null };
  });
}

/** What a response or cancel does to a bundle. `detach` is recorded when it closes without a live waiter. */
export interface Decision {
  questions: Question[];
  status: BundleStatus;
  closes: boolean;
  detach: string | null;
}

function assertOpen(b: BundleFacts): void {
  if (b.status !== 'pending') throw conflict(`clarification is already ${b.status}`, { status: b.status, bundle: viewOf(b) });
}

function closing(b: BundleFacts, questions: Question[], status: BundleStatus): Decision {
  const w = waiterOf(b);
  return { questions, status, closes: true, detach: !w.live && !b.detached_at ? w.detached_reason : null };
}

const closeStillPending = (questions: readonly Question[], to: QuestionStatus): Question[] =>
  questions.map((q) => (q.status === 'pending' ? { ...q, status: to } : q));

/**
 * Answers: each names a still-pending question of this bundle. Questions may be answered
 * over several responses; the bundle closes `answered` once none is pending. An answer to a
 * question that is no longer pending lost a race: CONFLICT, and nothing of the response applies.
 */
export function decideAnswers(b: BundleFacts, answers: readonly Answer[]): Decision {
  assertOpen(b);
  const byId = new Map(b.questions.map((q) => [q.id, q]));
  const given = new Map<string, string>();
  for (const a of answers) {
    const q = byId.get(a.question_id);
    if (!q) throw validationError(`no question ${a.question_id} in this clarification`, { question_id: a.question_id });
    if (given.has(a.question_id)) throw validationError(`question ${a.question_id} is answered twice`, { question_id: a.question_id });
    if (q.status !== 'pending')
      throw conflict(`question ${a.question_id} is already ${q.status}`, { question_id: a.question_id, status: q.status, bundle: viewOf(b) });
    given.set(a.question_id, a.answer);
  }
  const questions = b.questions.map((q) => (given.has(q.id) ? { ...q, status: 'answered' as const, answer: given.get(q.id)! } : q));
  if (questions.some((q) => q.status === 'pending')) return { questions, status: 'pending', closes: false, detach: null };
  return closing(b, questions, 'answered');
}

/** "Skip all questions": every still-pending question is rejected, terminal siblings stay. */
export function decideRejection(b: BundleFacts): Decision {
  assertOpen(b);
  return closing(b, closeStillPending(b.questions, 'rejected'), 'rejected');
}

/** only a bundle a live waiter still holds can be cancelled. */
export function decideCancel(b: BundleFacts): Decision {
  assertOpen(b);
  if (!waiterOf(b).live) throw notFound('no live waiter for this clarification', { detached_reason: waiterOf(b).detached_reason });
  return closing(b, closeStillPending(b.questions, 'cancelled'), 'cancelled');
}

/** The wait ran out: still-pending questions expire. Only the live waiter's own expiry applies. */
export function decideExpiry(b: BundleFacts): Decision | null {
  if (b.status !== 'pending' || !waiterOf(b).live) return null;
  return closing(b, closeStillPending(b.questions, 'expired'), 'expired');
}

/** What a lease renewal does: extend a live waiter's lease, or record that the waiter is gone. */
/** The waiting call's client is gone: a pending bundle that still had a waiter is detached. */
export function decideRelease(b: BundleFacts): { kind: 'detach'; reason: string } | { kind: 'none' } {
  return b.status === 'pending' && !b.detached_at ? { kind: 'detach', reason: DetachReasons.callerGone } : { kind: 'none' };
}

export function decideRenewal(b: BundleFacts): { kind: 'extend' } | { kind: 'detach'; reason: string } | { kind: 'none' } {
  if (b.status !== 'pending' || b.detached_at) return { kind: 'none' };
  const w = waiterOf(b);
  return w.live ? { kind: 'extend' } : { kind: 'detach', reason: w.detached_reason ?? DetachReasons.waiterLost };
}
