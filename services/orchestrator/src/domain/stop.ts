import { isActiveSession, isLiveExecution, type Execution, type SessionState } from '@kandev/contracts';

/** Fixed, non-destructive reasons: they never carry caller text into cleanup. */
export const StopReasons = {
  parentStop: 'stopped_by_parent_task',
  operatorStop: 'stopped_by_operator',
  treePause: 'tree_paused',
  treeCancel: 'tree_cancelled',
  /** An operator's turn cancel the agent did not acknowledge: the lifecycle tears it down. */
  cancelUnacknowledged: 'cancel_unacknowledged',
} as const;
export type StopReason = (typeof StopReasons)[keyof typeof StopReasons];
const STOP_REASONS: readonly string[] = Object.values(StopReasons);

/**
 * The reason a stop recorded on a CANCELLED session (its cancel_reason), for a teardown sent again
 * on its behalf: the same stop, so the same reason on the lifecycle's stop event. A session
 * cancelled before reasons were recorded reads as an operator's stop.
 */
export const recordedStopReason = (cancelReason: string | null): StopReason =>
  cancelReason !== null && STOP_REASONS.includes(cancelReason) ? (cancelReason as StopReason) : StopReasons.operatorStop;

export interface CandidateSession {
  id: string;
  state: SessionState;
  execution_id: string | null;
  /** The lifecycle instance that owns (or owned) that execution. */
  instance_id: string | null;
}

/** An execution a stop captured: named by id and routed to its owner instance (B-2). */
export interface CapturedExecution {
  execution_id: string;
  session_id: string;
  instance_id: string;
  /**
   * The registry listed it live when the stop read it. Otherwise it is the execution a session's
   * row names, sent to the row's owner in case its entry lapsed while the process lives on. Either
   * way, an owner that answers `already_gone`, or no owner at all, means it is gone.
   */
  listed: boolean;
}

export type Liveness =
  /** Its execution is registered and live: stop it. */
  | { kind: 'live'; execution: Execution }
  /** A launch is in flight (no execution admitted yet): cancelling the session fences it. */
  | { kind: 'launching' }
  /** The session row says active but its execution is gone: not live; reconcile the row. */
  | { kind: 'gone' }
  | { kind: 'inactive' };

/** Classify one candidate against the registry snapshot taken for this stop. */
export function livenessOf(session: CandidateSession, registry: readonly Execution[]): Liveness {
  if (!isActiveSession(session.state)) return { kind: 'inactive' };
  const live = registry.filter((e) => e.session_id === session.id && isLiveExecution(e.status));
  const captured = session.execution_id ? live.find((e) => e.execution_id === session.execution_id) : live[0];
  if (captured) return { kind: 'live', execution: captured };
  if (!session.execution_id && (session.state === 'STARTING' || session.state === 'CREATED')) return { kind: 'launching' };
  return { kind: 'gone' };
}

/**
 * What one stop will do. Planners (child stop, task stop, tree hold) build it from what they
 * read; one executor (flows/stop.ts) carries it out, so every stop behaves alike.
 */
export interface StopPlan {
  reason: StopReason;
  /** Active sessions to cancel through the normal transition, each with the execution captured for it. */
  cancel: Array<{ session_id: string; execution: CapturedExecution | null }>;
  /** Live executions to halt while their session keeps its state and message (orphans, R-2.4). */
  halt: CapturedExecution[];
  /**
   * Sessions that say active while the registry has no live entry for their execution: reconciled
   * to FAILED, never counted as live. The execution their row names is still sent to its
   * owner, as an orphan: an entry can lapse while its process lives (the owner's refresh held up
   * by a NATS restart or a stall).
   */
  gone: Array<{ session_id: string; execution: CapturedExecution | null }>;
}

const capture = (e: Execution): CapturedExecution => ({ execution_id: e.execution_id, session_id: e.session_id, instance_id: e.instance_id, listed: true });
/** The execution a session's row names, at the owner the row names (nothing listed it). */
const named = (s: CandidateSession): CapturedExecution | null =>
  s.execution_id && s.instance_id ? { execution_id: s.execution_id, session_id: s.id, instance_id: s.instance_id, listed: false } : null;

/**
 * a parent's stop of its child. Every candidate whose own execution is live (or still
 * launching, which the fence refuses) is cancelled; one whose execution vanished is reconciled,
 * and the execution its row names is swept at its owner all the same.
 */
export function planChildStop(candidates: readonly CandidateSession[], registry: readonly Execution[]): StopPlan {
  const plan: StopPlan = { reason: StopReasons.parentStop, cancel: [], halt: [], gone: [] };
  for (const s of candidates) {
    const l = livenessOf(s, registry);
    if (l.kind === 'live') plan.cancel.push({ session_id: s.id, execution: capture(l.execution) });
    else if (l.kind === 'launching') plan.cancel.push({ session_id: s.id, execution: null });
    else if (l.kind === 'gone') plan.gone.push({ session_id: s.id, execution: named(s) });
  }
  return plan;
}

/**
 * an operator's task stop: the union of the task's active sessions and every execution
 * the registry holds for the task, including orphans whose session is already terminal.
 *
 * An active session whose execution the registry does not list is still torn down at the owner
 * its row names: an entry can lapse while its process lives (the owner's refresh held up by a NATS
 * restart or a stall), and the session is cancelled either way. The owner answers `already_gone`
 * if it really is (as for a tree hold).
 */
export function planTaskStop(active: readonly CandidateSession[], registry: readonly Execution[]): StopPlan {
  const claimed = new Set<string>();
  const cancel = active.map((s) => {
    const l = livenessOf(s, registry);
    const execution = l.kind === 'live' ? capture(l.execution) : l.kind === 'gone' ? named(s) : null;
    if (execution) claimed.add(execution.execution_id);
    return { session_id: s.id, execution };
  });
  // Every other live execution is halted as an orphan: of a terminal session, or an extra one of
  // an active session (not the captured one).
  const halt = registry.filter((e) => isLiveExecution(e.status) && !claimed.has(e.execution_id)).map(capture);
  return { reason: StopReasons.operatorStop, cancel, halt, gone: [] };
}

/**
 * a tree hold stops every active session of its members at once, each with the
 * execution its row names (the owner answers `already_gone` for one that ended, and the fence
 * refuses a launch still in flight), and halts every other live execution the registry holds for a
 * member (R-2.1's orphans: a process living on under a FAILED or otherwise terminal session, or an
 * extra one of an active session), as a task stop does. `registry` is the members' entries as
 * listed for this hold; an entry of a launching session (no execution on its row yet) is left to
 * the fence.
 */
export function planTreeStop(
  sessions: readonly CandidateSession[],
  reason: typeof StopReasons.treePause | typeof StopReasons.treeCancel,
  registry: readonly Execution[] = [],
): StopPlan {
  const active = sessions.filter((s) => isActiveSession(s.state));
  const cancel = active.map((s) => ({ session_id: s.id, execution: named(s) }));
  const claimed = new Set(active.flatMap((s) => (s.execution_id ? [s.execution_id] : [])));
  const launching = new Set(active.filter((s) => !s.execution_id).map((s) => s.id));
  const halt = registry.filter((e) => isLiveExecution(e.status) && !claimed.has(e.execution_id) && !launching.has(e.session_id)).map(capture);
  return { reason, cancel, halt, gone: [] };
}

/** A stop's teardown of one captured execution, after commit. */
export interface Teardown {
  execution: CapturedExecution;
  /** Halted while its session keeps its terminal state. */
  orphaned: boolean;
}

/** What a stop writes, decided from its plan and the session rows it holds locked. */
export interface StopDecision {
  /** Sessions to write CANCELLED: still active, holding the execution the plan captured (if any). */
  cancel: string[];
  /** Sessions that say active while their execution is gone: reconciled. */
  gone: string[];
  teardowns: Teardown[];
}

/**
 * The per-session guard's recheck: under the locks, a session a concurrent path ended, or
 * one holding another execution than the one captured, is not this stop's to cancel.
 */
export function decideStops(plan: StopPlan, locked: readonly CandidateSession[]): StopDecision {
  const rows = new Map(locked.map((s) => [s.id, s]));
  const toCancel = plan.cancel.filter((c) => {
    const s = rows.get(c.session_id);
    return s !== undefined && isActiveSession(s.state) && (!c.execution || !s.execution_id || s.execution_id === c.execution.execution_id);
  });
  // a stop that stops nothing (`not_running`) changes nothing: a row whose execution is gone
  // is then the reconciler's to repair (flows/reconcile.ts), never the stop's answer. One that does
  // stop something reconciles the gone rows beside it, so the task's move to REVIEW is not
  // held up by a session that only says it works.
  const stops = toCancel.length > 0 || plan.halt.length > 0;
  const gone = !stops
    ? []
    : plan.gone.filter((g) => {
        const s = rows.get(g.session_id);
        return s !== undefined && s.execution_id !== null && isActiveSession(s.state) && (!g.execution || s.execution_id === g.execution.execution_id);
      });
  return {
    cancel: toCancel.map((c) => c.session_id),
    gone: gone.map((g) => g.session_id),
    teardowns: [
      ...toCancel.filter((c) => c.execution).map((c) => ({ execution: c.execution!, orphaned: false })),
      ...plan.halt.map((execution) => ({ execution, orphaned: true })),
      // Their sessions are terminal once this commits: what still runs of them is an orphan.
      ...gone.filter((g) => g.execution).map((g) => ({ execution: g.execution!, orphaned: true })),
    ],
  };
}

/** A stop that cancelled a session or halted an execution the registry listed (a gone session alone is not one: ). */
export const decisionStops = (plan: StopPlan, decision: StopDecision) => decision.cancel.length > 0 || plan.halt.length > 0;

export const planIsEmpty = (plan: StopPlan) => plan.cancel.length === 0 && plan.halt.length === 0 && plan.gone.length === 0;
