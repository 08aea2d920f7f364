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
 * The crossings a change of state makes, in the order they are acted on: into `warned` from `ok`
 * (the warning); into `exceeded` from `warned` (the pause); from `ok` straight past the cap, both:
 * the warning first, then the pause, as if the spend had passed the threshold on its way (a cap is
 * never reached unannounced). Falling back (a raised cap) and staying put make none, so a crossing
 * is acted on once however many cost events follow it.
 */
export function crossingsBetween(before: BudgetState, after: BudgetState): BudgetCrossing[] {
  if (after === 'exceeded') return before === 'exceeded' ? [] : before === 'ok' ? ['warned', 'exceeded'] : ['exceeded'];
  if (after === 'warned') return before === 'ok' ? ['warned'] : [];
  return [];
}

/** The key the orchestrator acts on a crossing once by (a hold's request id, an audit row's). */
export const crossingKey = (rootTaskId: string, seq: number): string => `budget:${rootTaskId}:${seq}`;

export interface BudgetChange {
  state: BudgetState;
  crossings: BudgetCrossing[];
}

/** A budget re-evaluated at a spend: its new state and the crossings it makes. */
export function evaluateBudget(before: BudgetState, spentCents: number, limitCents: number, warnPercent: number): BudgetChange {
  const state = budgetState(spentCents, limitCents, warnPercent);
  return { state, crossings: crossingsBetween(before, state) };
}

/** What a budget row remembers of its crossings: how many so far, the newest not yet acted on, and a warning to report before it. */
export interface CrossingLedger {
  crossing_seq: number;
  pending: BudgetCrossing | null;
  /** A warning not yet reported (its key's sequence number), to be reported before `pending`. */
  warning_seq: number | null;
}

/**
 * The ledger after `crossings` (non-empty) are made: each gets the next sequence number and the
 * newest is pending. A warning is reported before the pause that follows it, once: the warning of
 * a jump past the cap, or one still unreported when the cap is reached (its report keeps its own
 * key, so the first report and this one act once between them).
 */
export function recordCrossings(ledger: CrossingLedger, crossings: readonly BudgetCrossing[]): CrossingLedger {
  const seq = ledger.crossing_seq + crossings.length;
  const pending = crossings.at(-1)!;
  if (pending === 'warned') return { crossing_seq: seq, pending, warning_seq: null };
  const unreported = ledger.pending === 'warned' ? ledger.crossing_seq : ledger.pending ? ledger.warning_seq : null;
  return { crossing_seq: seq, pending, warning_seq: crossings.includes('warned') ? seq - 1 : unreported };
}
