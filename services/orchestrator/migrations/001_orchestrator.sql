-- Tasks, sessions, turns, the message queue and the audit log (SPEC §2). Owned by the orchestrator.
CREATE TABLE workspaces (
  id uuid PRIMARY KEY,
  name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tasks (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  parent_id uuid REFERENCES tasks (id),
  title text NOT NULL,
  description text,
  status text NOT NULL DEFAULT 'TODO',
  office boolean NOT NULL DEFAULT false,
  agent text,
  archived_at timestamptz,
  cancelled_at timestamptz,
  checkout_agent_id text,
  checkout_at timestamptz,
  -- Launch fence (B-1): bumped under the task's row lock by every stop; a launch admitted
  -- under an older epoch is refused when it registers.
  fence_epoch bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_parent ON tasks (parent_id);
CREATE INDEX tasks_workspace ON tasks (workspace_id);

CREATE TABLE sessions (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL REFERENCES tasks (id),
  state text NOT NULL,
  error_message text,
  -- Why the session ended when it was stopped (fixed, non-destructive vocabulary).
  cancel_reason text,
  is_primary boolean NOT NULL DEFAULT false,
  agent text,
  execution_id uuid,
  instance_id text,
  -- R-3.5: after an operator cancel, queued messages wait until the operator resumes.
  queue_paused boolean NOT NULL DEFAULT false,
  started_at timestamptz,
  completed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_task ON sessions (task_id, created_at);

CREATE TABLE turns (
  id uuid PRIMARY KEY,
  session_id uuid NOT NULL REFERENCES sessions (id),
  execution_id uuid,
  prompt text,
  sender_task_id uuid,
  started_at timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz,
  stop_reason text
);
CREATE INDEX turns_session ON turns (session_id, started_at);

CREATE TABLE queued_messages (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL REFERENCES tasks (id),
  session_id uuid NOT NULL REFERENCES sessions (id),
  position bigserial,
  prompt text NOT NULL,
  sender_task_id uuid,
  queued_by text NOT NULL,
  queued_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queued_messages_session ON queued_messages (session_id, position);

CREATE TABLE audit_log (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL,
  workspace_id uuid NOT NULL,
  action text NOT NULL,
  actor text NOT NULL,
  reason text,
  request_id text,
  outcome text NOT NULL,
  details jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_task ON audit_log (task_id, created_at DESC);
