import { isActiveSession, isLiveExecution, type Execution, type SessionState } from '@kandev/contracts';

/** Fixed, non-destructive reasons: they never carry caller text into cleanup. */
export const StopReasons = {
  parentStop: 'stopped_by_parent_task',
  operatorStop: 'stopped_by_operator',
  treePause: 'tree_paused',
  treeCancel: 'tree_cancelled',
  launchFenced: 'launch_fenced',
} as const;

export interface CandidateSession {
  id: string;
  state: SessionState;
  execution_id: string | null;
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

export interface TaskStopPlan {
  /** Active sessions to cancel through the normal transition, with the execution captured if any. */
  cancel: Array<{ session_id: string; execution: Execution | null }>;
  /** Registered executions whose session is not active: halted, session left as it is. */
  orphans: Execution[];
}

/**
 * the union of the task's active sessions and every execution the registry holds for
 * the task, including orphans whose session is already terminal.
 */
export function planTaskStop(active: readonly CandidateSession[], registry: readonly Execution[]): TaskStopPlan {
  const activeIds = new Set(active.map((s) => s.id));
  const claimed = new Set<string>();
  const cancel = active.map((s) => {
    const l = livenessOf(s, registry);
    const execution = l.kind === 'live' ? l.execution : null;
    if (execution) claimed.add(execution.execution_id);
    return { session_id: s.id, execution };
  });
  const orphans = registry.filter((e) => isLiveExecution(e.status) && !claimed.has(e.execution_id) && !activeIds.has(e.session_id));
  // An extra live execution of an active session (not the captured one) is also halted as an orphan.
  const extras = registry.filter((e) => isLiveExecution(e.status) && !claimed.has(e.execution_id) && activeIds.has(e.session_id));
  return { cancel, orphans: [...orphans, ...extras] };
}

export const taskStopFoundNothing = (plan: TaskStopPlan) => plan.cancel.length === 0 && plan.orphans.length === 0;
