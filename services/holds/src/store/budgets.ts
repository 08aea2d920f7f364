import type { BudgetCrossing, BudgetState, TreeBudget } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';
import type { CrossingLedger } from '../domain/budget.js';

type Q = Sql | Tx;

export interface BudgetRow {
  task_id: string;
  workspace_id: string;
  limit_cents: string | number;
  warn_percent: number;
  state: BudgetState;
  hold_id: string | null;
  crossing_seq: number;
  pending: BudgetCrossing | null;
  warning_seq: number | null;
  /** The tree's running total (ADR 0078): every cost event of the tree adds to it in its own transaction. */
  spent_cents: string | number;
}
const COLUMNS = ['task_id', 'workspace_id', 'limit_cents', 'warn_percent', 'state', 'hold_id', 'crossing_seq', 'pending', 'warning_seq', 'spent_cents'];
/** The columns as identifiers in a tagged template, qualified by `alias` when given. */
const cols = (q: Q, alias?: string) => q(alias ? COLUMNS.map((c) => `${alias}.${c}`) : COLUMNS);

export const toBudget = (r: BudgetRow): TreeBudget => ({
  task_id: r.task_id,
  limit_cents: Number(r.limit_cents),
  warn_percent: r.warn_percent,
  spent_cents: Number(r.spent_cents),
  state: r.state,
  hold_id: r.hold_id,
});

export async function getBudget(q: Q, rootId: string): Promise<BudgetRow | null> {
  const [row] = await q<BudgetRow[]>`SELECT ${cols(q)} FROM tree_budgets WHERE task_id = ${rootId}`;
  return row ?? null;
}

/**
 * The lock that keeps a running total exact when a budget is created or re-synced while cost
 * events of its tree commit (ADR 0078): every cost event takes it shared before it looks for its
 * tree's budget, a PUT takes it exclusive before it counts the tree. So a PUT counts every event
 * that did not see its budget, and an event that starts after the PUT sees the budget. Shared
 * locks do not wait for each other: the events of a tree without a budget never queue on it.
 * Returns the task's root (null when the task is not in the projection).
 */
export async function lockTreeSpendShared(tx: Tx, taskId: string): Promise<string | null> {
  const [row] = await tx<{ root_id: string }[]>`
    SELECT root_id, pg_advisory_xact_lock_shared(hashtextextended('kandev.budget-spend:' || root_id::text, 0)) FROM task_tree WHERE task_id = ${taskId}`;
  return row?.root_id ?? null;
}

/** The PUT's side of `lockTreeSpendShared`: waits for the tree's cost events in flight, holds new ones off until commit. */
export async function lockTreeSpendExclusive(tx: Tx, rootId: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended('kandev.budget-spend:' || ${rootId}::text, 0))`;
}

/**
 * A cost event of this tree adds to its budget's running total, exactly once (in the event's own
 * transaction, only for an event not recorded before). The UPDATE locks the budget row, so the
 * events of one budgeted tree take it one after another and exactly one of them sees the state
 * change it makes (B-8, B-5); its lock is held only for a primary-key update, never for a count of
 * the tree. Null when the tree has no budget (nothing locked).
 */
export async function addToBudgetSpend(tx: Tx, rootId: string, cents: number): Promise<BudgetRow | null> {
  const [row] = await tx<BudgetRow[]>`UPDATE tree_budgets SET spent_cents = spent_cents + ${cents} WHERE task_id = ${rootId} RETURNING ${cols(tx)}`;
  return row ?? null;
}

/** Create or change a budget's cap and threshold (the state is written by `writeState` in the same transaction). */
export async function upsertBudget(
  tx: Tx,
  b: { task_id: string; workspace_id: string; limit_cents: number; warn_percent: number; created_by: string; spent_cents: number },
): Promise<BudgetRow> {
  // The spend is the tree's count, made under `lockTreeSpendExclusive`: a PUT also re-syncs the total.
  const [row] = await tx<BudgetRow[]>`
    INSERT INTO tree_budgets (task_id, workspace_id, limit_cents, warn_percent, state, created_by, spent_cents)
    VALUES (${b.task_id}, ${b.workspace_id}, ${b.limit_cents}, ${b.warn_percent}, 'ok', ${b.created_by}, ${b.spent_cents})
    ON CONFLICT (task_id) DO UPDATE SET limit_cents = EXCLUDED.limit_cents, warn_percent = EXCLUDED.warn_percent,
      spent_cents = EXCLUDED.spent_cents, updated_at = now()
    RETURNING ${cols(tx)}`;
  return row!;
}

/** A budget's new state, and with crossings its new ledger (domain/budget.ts `recordCrossings`). */
export async function writeState(tx: Tx, rootId: string, state: BudgetState, ledger: CrossingLedger | null): Promise<BudgetRow> {
  const [row] = ledger
    ? await tx<BudgetRow[]>`
        UPDATE tree_budgets SET state = ${state}, crossing_seq = ${ledger.crossing_seq}, pending = ${ledger.pending}, warning_seq = ${ledger.warning_seq},
          updated_at = now()
        WHERE task_id = ${rootId} RETURNING ${cols(tx)}`
    : await tx<BudgetRow[]>`UPDATE tree_budgets SET state = ${state}, updated_at = now() WHERE task_id = ${rootId} RETURNING ${cols(tx)}`;
  return row!;
}

/**
 * The orchestrator acted on crossing `seq`: it is no longer pending, and its hold (if it made one)
 * is the budget's. Nothing when a newer crossing replaced it or another replica settled it first.
 */
export async function settleCrossing(tx: Tx, rootId: string, seq: number, holdId: string | null): Promise<BudgetRow | null> {
  const [row] = await tx<BudgetRow[]>`
    UPDATE tree_budgets SET pending = NULL, warning_seq = NULL, hold_id = COALESCE(${holdId}::uuid, hold_id), updated_at = now()
    WHERE task_id = ${rootId} AND crossing_seq = ${seq} AND pending IS NOT NULL RETURNING ${cols(tx)}`;
  return row ?? null;
}

/** Crossings still pending after `olderThanMs` (the instance that made them died before acting). */
export async function stalePendingCrossings(q: Q, olderThanMs: number, limit: number): Promise<BudgetRow[]> {
  return q<BudgetRow[]>`
    SELECT ${cols(q)} FROM tree_budgets WHERE pending IS NOT NULL AND updated_at < now() - make_interval(secs => ${olderThanMs}::float8 / 1000)
    ORDER BY updated_at LIMIT ${limit}`;
}

/** A released hold is no longer any budget's. */
export async function clearBudgetHold(q: Q, holdId: string): Promise<void> {
  await q`UPDATE tree_budgets SET hold_id = NULL, updated_at = now() WHERE hold_id = ${holdId}`;
}

export async function deleteBudget(q: Q, rootId: string): Promise<boolean> {
  const rows = await q`DELETE FROM tree_budgets WHERE task_id = ${rootId} RETURNING task_id`;
  return rows.length > 0;
}
