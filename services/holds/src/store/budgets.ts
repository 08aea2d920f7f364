import type { BudgetCrossing, BudgetState, TreeBudget } from '@kandev/contracts';
import type { Sql, Tx } from '@kandev/runtime';

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
}
const COLUMNS = ['task_id', 'workspace_id', 'limit_cents', 'warn_percent', 'state', 'hold_id', 'crossing_seq', 'pending'];
/** The columns as identifiers in a tagged template, qualified by `alias` when given. */
const cols = (q: Q, alias?: string) => q(alias ? COLUMNS.map((c) => `${alias}.${c}`) : COLUMNS);

export const toBudget = (r: BudgetRow, spentCents: number): TreeBudget => ({
  task_id: r.task_id,
  limit_cents: Number(r.limit_cents),
  warn_percent: r.warn_percent,
  spent_cents: spentCents,
  state: r.state,
  hold_id: r.hold_id,
});

export async function getBudget(q: Q, rootId: string): Promise<BudgetRow | null> {
  const [row] = await q<BudgetRow[]>`SELECT ${cols(q)} FROM tree_budgets WHERE task_id = ${rootId}`;
  return row ?? null;
}

export async function lockBudget(tx: Tx, rootId: string): Promise<BudgetRow | null> {
  const [row] = await tx<BudgetRow[]>`SELECT ${cols(tx)} FROM tree_budgets WHERE task_id = ${rootId} FOR UPDATE`;
  return row ?? null;
}

/**
 * The budget of the tree a task is in, locked (FOR UPDATE): the cost events of one budgeted tree
 * take it one after another, so exactly one of them sees the state change it makes (B-8, B-5).
 * One index probe through the projection's root_id; nothing locked when the tree has no budget.
 */
export async function lockBudgetOfTask(tx: Tx, taskId: string): Promise<BudgetRow | null> {
  const [row] = await tx<BudgetRow[]>`
    SELECT ${cols(tx, 'b')} FROM task_tree t JOIN tree_budgets b ON b.task_id = t.root_id WHERE t.task_id = ${taskId} FOR UPDATE OF b`;
  return row ?? null;
}

/** Create or change a budget's cap and threshold (the state is written by `writeState` in the same transaction). */
export async function upsertBudget(
  tx: Tx,
  b: { task_id: string; workspace_id: string; limit_cents: number; warn_percent: number; created_by: string },
): Promise<BudgetRow> {
  const [row] = await tx<BudgetRow[]>`
    INSERT INTO tree_budgets (task_id, workspace_id, limit_cents, warn_percent, state, created_by)
    VALUES (${b.task_id}, ${b.workspace_id}, ${b.limit_cents}, ${b.warn_percent}, 'ok', ${b.created_by})
    ON CONFLICT (task_id) DO UPDATE SET limit_cents = EXCLUDED.limit_cents, warn_percent = EXCLUDED.warn_percent, updated_at = now()
    RETURNING ${cols(tx)}`;
  return row!;
}

/** A budget's new state; a crossing also becomes the pending one, under a new sequence number. */
export async function writeState(tx: Tx, rootId: string, state: BudgetState, crossing: BudgetCrossing | null): Promise<BudgetRow> {
  const [row] = crossing
    ? await tx<BudgetRow[]>`
        UPDATE tree_budgets SET state = ${state}, crossing_seq = crossing_seq + 1, pending = ${crossing}, updated_at = now()
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
    UPDATE tree_budgets SET pending = NULL, hold_id = COALESCE(${holdId}::uuid, hold_id), updated_at = now()
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
