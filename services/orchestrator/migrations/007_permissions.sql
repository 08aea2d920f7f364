-- Permission requests of agents (SPEC R-8.3). Owned by the orchestrator: rows come from the
-- lifecycle's agent.permission_* events; an operator's answer closes one through the owning agentctl.
CREATE TABLE permission_requests (
  id uuid PRIMARY KEY,
  task_id uuid NOT NULL REFERENCES tasks (id),
  -- Denormalised from the task: access checks read the row alone.
  workspace_id uuid NOT NULL,
  session_id uuid NOT NULL REFERENCES sessions (id),
  -- The turn the agent asked in (agentctl's turn id is the orchestrator's); null when it was not one of ours.
  turn_id uuid,
  execution_id uuid NOT NULL,
  -- agentctl's id for the request: what the answer names on the agent's side.
  permission_id text NOT NULL,
  title text NOT NULL,
  options jsonb NOT NULL DEFAULT '[]'::jsonb,
  status text NOT NULL DEFAULT 'pending',
  chosen_option_id text,
  created_at timestamptz NOT NULL DEFAULT now(),
  closed_at timestamptz,
  closed_by text,
  CONSTRAINT permission_requests_status CHECK (status IN ('pending', 'answered', 'cancelled')),
  CONSTRAINT permission_requests_closed CHECK ((status = 'pending') = (closed_at IS NULL)),
  -- One row per request of an execution, whichever of its events (requested, resolved) arrives first.
  CONSTRAINT permission_requests_agent_id UNIQUE (execution_id, permission_id)
);
-- GET /tasks/:id/permissions: pending first, then newest first.
CREATE INDEX permission_requests_task ON permission_requests (task_id, created_at DESC);
-- A stopped execution's still-pending requests are closed in one statement.
CREATE INDEX permission_requests_pending_execution ON permission_requests (execution_id) WHERE status = 'pending';
