-- Idempotency keys of task creation (HTTP and MCP) and message_task_kandev (issue 10): an agent
-- retrying after a timeout gets the first answer instead of acting twice. One row per
-- (caller, operation, key); the unique constraint is what makes a concurrent retry lose the race.
CREATE TABLE idempotency_keys (
  -- Who asked: `operator:<sub>` or `agent:<task_id>`; a key never matches another caller's.
  scope text NOT NULL,
  operation text NOT NULL,
  key text NOT NULL,
  -- sha256 of the request's own fields: the same key with a different request is a CONFLICT.
  request_hash text NOT NULL,
  -- The answer to repeat; null while the first request is still running.
  result jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT idempotency_keys_unique UNIQUE (scope, operation, key)
);
