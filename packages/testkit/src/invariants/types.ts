export type InvariantName =
  | 'agent_outlived_stop'
  | 'active_session_without_execution'
  | 'task_in_progress_without_session'
  | 'effect_applied_twice'
  | 'accepted_request_lost'
  | 'control_action_unaudited';

export interface Violation {
  invariant: InvariantName;
  detail: string;
  /** How long the state has been this way; a violation once past its bound, pending before. */
  ageMs: number;
  /** null: no tolerance — the state is written in one transaction, so it is wrong the moment it is seen. */
  boundMs: number | null;
}

/** A state that is wrong as soon as it is committed (no settling time applies). */
export const at = (invariant: InvariantName, detail: string): Violation => ({ invariant, detail, ageMs: 0, boundMs: null });
