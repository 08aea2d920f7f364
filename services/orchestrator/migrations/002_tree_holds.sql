-- Tree holds (SPEC R-4). The orchestrator owns the task tree, so it owns the holds over it: the
-- hold, its members' status snapshots, their status changes, launch fences and session stops
-- commit in one transaction (docs/decisions/0006-tree-holds-in-the-orchestrator.md).
CREATE TABLE tree_holds (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  root_task_id uuid NOT NULL REFERENCES tasks (id),
  mode text NOT NULL CHECK (mode IN ('pause', 'cancel')),
  release_policy jsonb NOT NULL DEFAULT '{"strategy":"manual"}'::jsonb,
  created_by text NOT NULL,
  reason text,
  request_id text,
  created_at timestamptz NOT NULL DEFAULT now(),
  released_at timestamptz,
  released_by text,
  released_reason text
);
CREATE INDEX tree_holds_root_active ON tree_holds (root_task_id) WHERE released_at IS NULL;

CREATE TABLE tree_hold_members (
  hold_id uuid NOT NULL REFERENCES tree_holds (id) ON DELETE CASCADE,
  task_id uuid NOT NULL REFERENCES tasks (id),
  depth int NOT NULL,
  -- Status the member had when the hold took it (restore writes it back for cancel holds).
  task_status text NOT NULL,
  skip_reason text,
  -- True while the hold is active; cleared on release in the same transaction.
  active boolean NOT NULL DEFAULT true,
  PRIMARY KEY (hold_id, task_id)
);
CREATE INDEX idx_tree_hold_members_task ON tree_hold_members (task_id);
-- R-4.8: a task is a member of at most one active hold, whatever races the callers run.
CREATE UNIQUE INDEX tree_hold_members_one_active ON tree_hold_members (task_id) WHERE active;

-- Wakeup dispatch is at-least-once; a retried dispatch finds the session it already started.
ALTER TABLE sessions ADD COLUMN launch_key text;
CREATE UNIQUE INDEX sessions_launch_key ON sessions (launch_key) WHERE launch_key IS NOT NULL;
