-- Tree holds, wakeups and cost events (SPEC §2, R-4). Owned by the holds service.
CREATE TABLE tree_holds (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL,
  root_task_id uuid NOT NULL,
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
  task_id uuid NOT NULL,
  depth int NOT NULL,
  task_status text NOT NULL,
  skip_reason text,
  PRIMARY KEY (hold_id, task_id)
);
CREATE INDEX idx_tree_hold_members_task ON tree_hold_members (task_id);

CREATE TABLE wakeups (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL,
  reason text NOT NULL,
  payload jsonb,
  status text NOT NULL CHECK (status IN ('queued', 'claimed', 'finished', 'cancelled')),
  skip_reason text,
  idempotency_key text UNIQUE,
  session_id uuid,
  requested_at timestamptz NOT NULL DEFAULT now(),
  claimed_at timestamptz,
  finished_at timestamptz
);
CREATE INDEX wakeups_queued ON wakeups (requested_at) WHERE status = 'queued';
CREATE INDEX wakeups_task ON wakeups (task_id);

CREATE TABLE cost_events (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL,
  session_id uuid,
  usage_event_id text NOT NULL UNIQUE,
  model text,
  cost_cents numeric NOT NULL,
  tokens_in bigint NOT NULL,
  tokens_cached_in bigint NOT NULL,
  tokens_out bigint NOT NULL,
  occurred_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cost_events_task ON cost_events (task_id);

-- Projection of the task tree, fed by task events (the orchestrator owns the truth).
CREATE TABLE task_tree (
  task_id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL,
  parent_id uuid,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_tree_parent ON task_tree (parent_id);
