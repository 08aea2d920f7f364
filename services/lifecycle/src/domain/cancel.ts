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

/**
 * An operator's cancel the agent did not acknowledge within the cancel timeout escalates to a
 * teardown. The answer says so: CONFLICT with these details, never an
 * UNAVAILABLE that invites a retry of a cancel whose agent is already going.
 */
export const CANCEL_ESCALATION = { escalation: 'teardown', reason: 'cancel_unacknowledged' } as const;

export interface CancelEscalationDetails {
  escalation: 'teardown';
  reason: 'cancel_unacknowledged';
  execution_id: string;
  turn_id: string;
  grace_ms: number;
  cancel_timeout_ms: number;
  [k: string]: unknown;
}

export function cancelEscalation(o: { executionId: string; turnId: string; graceMs: number; cancelTimeoutMs: number }): CancelEscalationDetails {
  return { ...CANCEL_ESCALATION, execution_id: o.executionId, turn_id: o.turnId, grace_ms: o.graceMs, cancel_timeout_ms: o.cancelTimeoutMs };
}
