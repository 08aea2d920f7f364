-- Clarification bundles and their questions (SPEC R-5). Owned by the orchestrator.
CREATE TABLE clarification_bundles (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL REFERENCES tasks (id),
  -- Denormalised from the task: access checks read the bundle row alone.
  workspace_id uuid NOT NULL,
  session_id uuid NOT NULL REFERENCES sessions (id),
  -- The turn the agent asked in; a newer turn of the session supersedes the bundle (R-5.4).
  turn_id uuid REFERENCES turns (id),
  status text NOT NULL DEFAULT 'pending',
  reason text,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  -- Renewed by the mcp instance holding the tool call open; a lapsed lease means the waiter is
  -- gone (ADR 0007). Any replica can judge liveness from this column alone.
  waiter_lease_until timestamptz NOT NULL,
  -- Set once, never cleared: the waiter is gone for good and must never deliver an outcome.
  detached_at timestamptz,
  detached_reason text,
  closed_at timestamptz,
  closed_by text,
  CONSTRAINT clarification_bundles_status CHECK (status IN ('pending', 'answered', 'rejected', 'cancelled', 'expired'))
);
CREATE INDEX clarification_bundles_task ON clarification_bundles (task_id, created_at DESC);
CREATE INDEX clarification_bundles_pending_session ON clarification_bundles (session_id) WHERE status = 'pending';

CREATE TABLE clarification_questions (
  bundle_id uuid NOT NULL REFERENCES clarification_bundles (id) ON DELETE CASCADE,
  position int NOT NULL,
  id text NOT NULL,
  text text NOT NULL,
  options jsonb,
  status text NOT NULL DEFAULT 'pending',
  answer text,
  answered_at timestamptz,
  PRIMARY KEY (bundle_id, id),
  UNIQUE (bundle_id, position),
  CONSTRAINT clarification_questions_status CHECK (status IN ('pending', 'answered', 'rejected', 'expired', 'cancelled'))
);
