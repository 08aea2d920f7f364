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
const COLS = 'task_id, workspace_id, limit_cents, warn_percent, state, hold_id, crossing_seq, pending, warning_seq, spent_cents';

export const toBudget = (r: BudgetRow): TreeBudget => ({
  task_id: r.task_id,
  limit_cents: Number(r.limit_cents),
  warn_percent: r.warn_percent,
  spent_cents: Number(r.spent_cents),
  state: r.state,
  hold_id: r.hold_id,
});

export async function getBudget(q: Q, rootId: string): Promise<BudgetRow | null> {
  const [row] = await q.unsafe<BudgetRow[]>(`SELECT ${COLS} FROM tree_budgets WHERE task_id = $1`, [rootId], { prepare: true });
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
  const [row] = await tx.unsafe<{ root_id: string }[]>(
    `SELECT root_id, pg_advisory_xact_lock_shared(hashtextextended('kandev.budget-spend:' || root_id::text, 0)) FROM task_tree WHERE task_id = $1`,
    [taskId],
    { prepare: true },
  );
  return row?.root_id ?? null;
}

/** The PUT's side of `lockTreeSpendShared`: waits for the tree's cost events in flight, holds new ones off until commit. */
export async function lockTreeSpendExclusive(tx: Tx, rootId: string): Promise<void> {
  await tx.unsafe(`SELECT pg_advisory_xact_lock(hashtextextended('kandev.budget-spend:' || $1::text, 0))`, [rootId], { prepare: true });
}

/**
 * A cost event of this tree adds to its budget's running total, exactly once (in the event's own
 * transaction, only for an event not recorded before). The UPDATE locks the budget row, so the
 * events of one budgeted tree take it one after another and exactly one of them sees the state
 * change it makes (B-8, B-5); its lock is held only for a primary-key update, never for a count of
 * the tree. Null when the tree has no budget (nothing locked).
 */
export async function addToBudgetSpend(tx: Tx, rootId: string, cents: number): Promise<BudgetRow | null> {
  const [row] = await tx.unsafe<BudgetRow[]>(`UPDATE tree_budgets SET spent_cents = spent_cents + $2 WHERE task_id = $1 RETURNING ${COLS}`, [rootId, cents], {
    prepare: true,
  });
  return row ?? null;
}

/** Create or change a budget's cap and threshold (the state is written by `writeState` in the same transaction). */
export async function upsertBudget(
  tx: Tx,
  b: { task_id: string; workspace_id: string; limit_cents: number; warn_percent: number; created_by: string; spent_cents: number },
): Promise<BudgetRow> {
  // The spend is the tree's count, made under `lockTreeSpendExclusive`: a PUT also re-syncs the total.
  const [row] = await tx.unsafe<BudgetRow[]>(
    `INSERT INTO tree_budgets (task_id, workspace_id, limit_cents, warn_percent, state, created_by, spent_cents)
     VALUES ($1, $2, $3, $4, 'ok', $5, $6)
     ON CONFLICT (task_id) DO UPDATE SET limit_cents = EXCLUDED.limit_cents, warn_percent = EXCLUDED.warn_percent,
       spent_cents = EXCLUDED.spent_cents, updated_at = now()
     RETURNING ${COLS}`,
    [b.task_id, b.workspace_id, b.limit_cents, b.warn_percent, b.created_by, b.spent_cents],
    { prepare: true },
  );
  return row!;
}

/** A budget's new state, and with crossings its new ledger (domain/budget.ts `recordCrossings`). */
export async function writeState(tx: Tx, rootId: string, state: BudgetState, ledger: CrossingLedger | null): Promise<BudgetRow> {
  const [row] = await tx.unsafe<BudgetRow[]>(
    ledger
      ? `UPDATE tree_budgets SET state = $2, crossing_seq = $3, pending = $4, warning_seq = $5, updated_at = now() WHERE task_id = $1 RETURNING ${COLS}`
      : `UPDATE tree_budgets SET state = $2, updated_at = now() WHERE task_id = $1 RETURNING ${COLS}`,
    ledger ? [rootId, state, ledger.crossing_seq, ledger.pending, ledger.warning_seq] : [rootId, state],
    { prepare: true },
  );
  return row!;
}

/**
 * The orchestrator acted on crossing `seq`: it is no longer pending, and its hold (if it made one)
 * is the budget's. Nothing when a newer crossing replaced it or another replica settled it first.
 */
export async function settleCrossing(tx: Tx, rootId: string, seq: number, holdId: string | null): Promise<BudgetRow | null> {
  const [row] = await tx.unsafe<BudgetRow[]>(
    `UPDATE tree_budgets SET pending = NULL, warning_seq = NULL, hold_id = COALESCE($3::uuid, hold_id), updated_at = now()
     WHERE task_id = $1 AND crossing_seq = $2 AND pending IS NOT NULL RETURNING ${COLS}`,
    [rootId, seq, holdId],
    { prepare: true },
  );
  return row ?? null;
}

/** Crossings still pending after `olderThanMs` (the instance that made them died before acting). */
export async function stalePendingCrossings(q: Q, olderThanMs: number, limit: number): Promise<BudgetRow[]> {
  return q.unsafe<BudgetRow[]>(
    `SELECT ${COLS} FROM tree_budgets WHERE pending IS NOT NULL AND updated_at < now() - make_interval(secs => $1::float8 / 1000)
     ORDER BY updated_at LIMIT $2`,
    [olderThanMs, limit],
    { prepare: true },
  );
}

/** A released hold is no longer any budget's. */
export async function clearBudgetHold(q: Q, holdId: string): Promise<void> {
  await q`UPDATE tree_budgets SET hold_id = NULL, updated_at = now() WHERE hold_id = ${holdId}`;
}

export async function deleteBudget(q: Q, rootId: string): Promise<boolean> {
  const rows = await q`DELETE FROM tree_budgets WHERE task_id = ${rootId} RETURNING task_id`;
  return rows.length > 0;
}
