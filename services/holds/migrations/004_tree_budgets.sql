-- B-8 tree budgets (docs/decisions/0066-tree-budgets-live-with-the-costs.md). A budget caps the
-- cost of a root task's tree; it lives beside the cost events so the event that reaches the cap
-- decides it under this row's lock, in the event's own transaction.

-- Every task of the projection knows its tree's root, so a cost event finds its tree's budget with
-- one index probe (lineage is inserted root first and tasks are never re-parented).
ALTER TABLE task_tree ADD COLUMN root_id uuid;
WITH RECURSIVE r AS (
  SELECT task_id, task_id AS root_id FROM task_tree WHERE parent_id IS NULL
  UNION ALL
  SELECT c.task_id, r.root_id FROM task_tree c JOIN r ON c.parent_id = r.task_id
)
UPDATE task_tree t SET root_id = r.root_id FROM r WHERE r.task_id = t.task_id;

CREATE TABLE tree_budgets (
  task_id uuid PRIMARY KEY,          -- the root task
  workspace_id uuid NOT NULL,
  limit_cents numeric NOT NULL CHECK (limit_cents > 0),
  warn_percent int NOT NULL CHECK (warn_percent BETWEEN 1 AND 100),
  state text NOT NULL CHECK (state IN ('ok', 'warned', 'exceeded')),
  -- The active pause hold the budget made (cleared when that hold is released).
  hold_id uuid,
  -- Crossings so far; the newest one not yet acted on (audit, pause) is `pending`. The
  -- orchestrator acts once per crossing: the key is `budget:<task_id>:<crossing_seq>`.
  crossing_seq int NOT NULL DEFAULT 0,
  pending text CHECK (pending IN ('warned', 'exceeded')),
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
-- The sweeper's scan: crossings not acted on (their holds instance died before it could).
CREATE INDEX tree_budgets_pending ON tree_budgets (updated_at) WHERE pending IS NOT NULL;
CREATE INDEX tree_budgets_hold ON tree_budgets (hold_id) WHERE hold_id IS NOT NULL;
