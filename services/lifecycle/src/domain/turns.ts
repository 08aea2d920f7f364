import { isEndingExecution, type ExecutionStatus } from '@kandev/contracts';

/*
 * Turn bookkeeping of one execution, as a pure reducer. Turn ends can be learnt twice (the cancel
 * reply and agentctl's `turn_completed` line race each other), and lines can arrive late, so every
 * transition is keyed by turn id: only the current turn completes, and a completed turn never
 * comes back.
 */

export interface TurnView {
  status: ExecutionStatus;
  turn_id: string | null;
  /** Recently finished turn ids, newest last (bounded). */
  finished: readonly string[];
}

const FINISHED_KEPT = 32;

export type TurnStep = { view: TurnView; changed: boolean; publish: boolean };

const remember = (finished: readonly string[], turnId: string) => [...finished.filter((t) => t !== turnId), turnId].slice(-FINISHED_KEPT);

/** While tearing down the status stays STOPPING whatever the turns do. */
const idleOr = (v: TurnView): ExecutionStatus => (v.status === 'STOPPING' ? 'STOPPING' : 'READY');
const busyOr = (v: TurnView): ExecutionStatus => (v.status === 'STOPPING' ? 'STOPPING' : 'RUNNING');

/** May a new prompt be sent? Only to an idle, launched execution. */
export function promptRefusal(v: TurnView): null | { code: 'CONFLICT'; message: string } {
  if (isEndingExecution(v.status)) return { code: 'CONFLICT', message: 'agent not running' };
  if (v.status === 'STARTING') return { code: 'CONFLICT', message: 'execution is still starting' };
  if (v.turn_id !== null) return { code: 'CONFLICT', message: `a turn is in flight (${v.turn_id})` };
  return null;
}

/** agentctl accepted the prompt: the turn is in flight from now on, whatever the stdout lag. */
export function promptAccepted(v: TurnView, turnId: string): TurnStep {
  return { view: { ...v, status: busyOr(v), turn_id: turnId }, changed: true, publish: false };
}

/** `turn_started` line: publish once; a line for a turn that already finished is stale. */
export function turnStarted(v: TurnView, turnId: string): TurnStep {
  if (v.finished.includes(turnId)) return { view: v, changed: false, publish: false };
  const changed = v.turn_id !== turnId || v.status !== busyOr(v);
  return { view: { ...v, status: busyOr(v), turn_id: turnId }, changed, publish: true };
}

/** `turn_completed` line or a cancel reply: completes the current turn exactly once. */
export function turnCompleted(v: TurnView, turnId: string): TurnStep {
  if (v.finished.includes(turnId)) return { view: v, changed: false, publish: false };
  if (v.turn_id !== null && v.turn_id !== turnId) {
    // A turn we never saw as current (its start line was lost): record it, leave the current one.
    return { view: { ...v, finished: remember(v.finished, turnId) }, changed: false, publish: true };
  }
  return { view: { status: idleOr(v), turn_id: null, finished: remember(v.finished, turnId) }, changed: true, publish: true };
}
