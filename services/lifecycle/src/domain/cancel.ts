import { isEndingExecution, type ExecutionStatus } from '@kandev/contracts';

/*
 * Target fencing of a cancel (B-2): the caller names the execution and, optionally, the turn it
 * captured. A mismatch fails closed: nothing is cancelled.
 */
export type CancelDecision =
  { kind: 'not_running' } | { kind: 'no_active_turn' } | { kind: 'turn_mismatch'; current: string; requested: string } | { kind: 'cancel'; turnId: string };

export function decideCancel(current: { status: ExecutionStatus; turn_id: string | null }, requestedTurnId: string | null | undefined): CancelDecision {
  if (isEndingExecution(current.status)) return { kind: 'not_running' };
  // A named turn that already ended is not a mismatch: there is simply nothing left to cancel.
  if (current.turn_id === null) return { kind: 'no_active_turn' };
  if (requestedTurnId && requestedTurnId !== current.turn_id) return { kind: 'turn_mismatch', current: current.turn_id, requested: requestedTurnId };
  return { kind: 'cancel', turnId: current.turn_id };
}
