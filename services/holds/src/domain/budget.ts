import type { BudgetCrossing, BudgetState } from '@kandev/contracts';

/**
 * B-8: the state a budget is in at this spend. The cap is reached when the tree's cost is at or
 * above it (`exceeded`); the warning when the cost is at or above `warn_percent` of it.
 */
export function budgetState(spentCents: number, limitCents: number, warnPercent: number): BudgetState {
  if (spentCents >= limitCents) return 'exceeded';
  // In whole percent of cents, so 80 % of 1000 is 800 exactly (no float rounding at the threshold).
  if (spentCents * 100 >= limitCents * warnPercent) return 'warned';
  return 'ok';
}

/**
 * The crossing a change of state is, if any: into `exceeded` from below (the pause), or into
 * `warned` from `ok` (the warning). Falling back (a raised cap) and staying put are no crossing,
 * so a crossing is acted on once however many cost events follow it.
 */
export function crossingOf(before: BudgetState, after: BudgetState): BudgetCrossing | null {
  if (after === 'exceeded') return before === 'exceeded' ? null : 'exceeded';
  if (after === 'warned') return before === 'ok' ? 'warned' : null;
  return null;
}

/** The key the orchestrator acts on a crossing once by (a hold's request id, an audit row's). */
export const crossingKey = (rootTaskId: string, seq: number): string => `budget:${rootTaskId}:${seq}`;

export interface BudgetChange {
  state: BudgetState;
  crossing: BudgetCrossing | null;
}

/** A budget re-evaluated at a spend: its new state and the crossing it makes. */
export function evaluateBudget(before: BudgetState, spentCents: number, limitCents: number, warnPercent: number): BudgetChange {
  const state = budgetState(spentCents, limitCents, warnPercent);
  return { state, crossing: crossingOf(before, state) };
}
