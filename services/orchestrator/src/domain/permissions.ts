import { conflict, validationError, type AgentPermissionOutcome, type PermissionRequest } from '@kandev/contracts';
import type { Closure } from '../store/permissions.js';

/*
 * The rules of permission requests, as plain functions: which answers an operator may give,
 * and how agentctl's word on a request becomes the row's closed state.
 */

export type OperatorAnswer = { option_id: string } | { cancelled: true };

/** Refuses an answer before anything is sent: a closed request (CONFLICT), an option the agent did not offer (VALIDATION_ERROR). */
export function checkAnswer(row: PermissionRequest, answer: OperatorAnswer): void {
  if (row.status !== 'pending') {
    throw conflict(`permission request is already ${row.status}`, { status: row.status, chosen_option_id: row.chosen_option_id, closed_by: row.closed_by });
  }
  if ('option_id' in answer && !row.options.some((o) => o.option_id === answer.option_id)) {
    throw validationError('option_id is not one of the options the agent offered', {
      option_id: answer.option_id,
      options: row.options.map((o) => o.option_id),
    });
  }
}

/** The row's closed state for what agentctl did: an option given (answered) or the cancelled outcome. */
export function closureOf(outcome: AgentPermissionOutcome, optionId: string | null, closedBy: string): Closure {
  return outcome === 'cancelled' || optionId === null
    ? { status: 'cancelled', chosen_option_id: null, closed_by: closedBy }
    : { status: 'answered', chosen_option_id: optionId, closed_by: closedBy };
}

/** Who closed a request that agentctl settled on its own (a turn cancel or stop, the turn's end, an agent that went away). */
export const AGENT_CLOSER = 'system:agent';
/** Who closed the still-pending requests of an execution that stopped. */
export const STOPPED_CLOSER = 'system:execution_stopped';
