-- B-8 (docs/decisions/0078-a-budget-keeps-its-trees-running-total.md): a budget keeps its tree's
-- spend as a running total, added to by each cost event of the tree in the event's own transaction,
-- so the check no longer recomputes the tree's cost (O(tasks)) under the budget's row lock.
ALTER TABLE tree_budgets ADD COLUMN spent_cents numeric NOT NULL DEFAULT 0;
-- Every projection row names its root (migration 004), so the backfill needs no recursion.
UPDATE tree_budgets b SET spent_cents = COALESCE(
  (SELECT sum(c.cost_cents) FROM task_tree t JOIN task_costs c ON c.task_id = t.task_id WHERE t.root_id = b.task_id), 0);
-- A warning not yet reported when the cap was reached (or the warning of a jump past the cap): the
-- sequence number of its key, reported before `pending` so the audit says warned, then exceeded.
ALTER TABLE tree_budgets ADD COLUMN warning_seq int;
