-- Tree holds moved to the orchestrator (it owns the task tree; docs/decisions/0006). This service
-- keeps what it needs to gate wakeups: which hold gates which task, fed by the orchestrator.
DROP TABLE tree_hold_members;
DROP TABLE tree_holds;

-- One row per hold this service heard of; released_at is a tombstone, so a late or redelivered
-- "created" for a released hold never gates its members again.
CREATE TABLE hold_gates (
  hold_id uuid PRIMARY KEY,
  root_task_id uuid NOT NULL,
  mode text NOT NULL CHECK (mode IN ('pause', 'cancel')),
  created_at timestamptz NOT NULL,
  released_at timestamptz
);
-- The gate the dispatcher reads in its claim statement (R-4.3): a task is in at most one active hold.
CREATE TABLE held_tasks (
  task_id uuid PRIMARY KEY,
  hold_id uuid NOT NULL REFERENCES hold_gates (hold_id),
  mode text NOT NULL CHECK (mode IN ('pause', 'cancel')),
  hold_created_at timestamptz NOT NULL
);
CREATE INDEX held_tasks_hold ON held_tasks (hold_id);

-- Wakeups are scoped to their task's workspace; an idempotency key is unique per task, not across tenants.
ALTER TABLE wakeups ADD COLUMN workspace_id uuid;
ALTER TABLE wakeups ADD COLUMN attempts int NOT NULL DEFAULT 0;
-- A wakeup may be scheduled: it is not dispatched before run_at (NULL = as soon as possible).
ALTER TABLE wakeups ADD COLUMN run_at timestamptz;
ALTER TABLE wakeups DROP CONSTRAINT wakeups_idempotency_key_key;
ALTER TABLE wakeups ADD CONSTRAINT wakeups_task_idempotency_key UNIQUE (task_id, idempotency_key);
CREATE INDEX wakeups_claimed ON wakeups (claimed_at) WHERE status = 'claimed';
DROP INDEX wakeups_queued;
CREATE INDEX wakeups_queued ON wakeups (COALESCE(run_at, requested_at), id) WHERE status = 'queued';
CREATE INDEX wakeups_active_task ON wakeups (task_id) WHERE status IN ('queued', 'claimed');

-- Per-task cost rollup, updated in the cost event's own transaction: a tree's summary costs
-- O(tasks in the subtree), not O(events) (R-4.7).
ALTER TABLE cost_events ADD COLUMN priced boolean NOT NULL DEFAULT true;
CREATE TABLE task_costs (
  task_id uuid PRIMARY KEY,
  events bigint NOT NULL DEFAULT 0,
  -- Events whose model has no price (packages/contracts/src/pricing.ts): recorded at cost 0.
  unpriced_events bigint NOT NULL DEFAULT 0,
  cost_cents numeric NOT NULL DEFAULT 0,
  tokens_in bigint NOT NULL DEFAULT 0,
  tokens_cached_in bigint NOT NULL DEFAULT 0,
  tokens_out bigint NOT NULL DEFAULT 0
);
-- task_tree (001) is a projection of the task tree: every task that has a cost event, with its
-- ancestors (asked of the orchestrator when a task is first seen). Tasks are never re-parented.
