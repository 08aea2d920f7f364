-- The operator's read surface (SPEC R-8.1, R-8.2): list indexes and the session transcript.

-- Task listings page newest first by (created_at, id) inside one workspace (keyset, docs/limits.md).
-- One index per filter shape, so a page of a 100,000-task workspace reads ~limit index entries.
CREATE INDEX tasks_workspace_page ON tasks (workspace_id, created_at DESC, id DESC);
CREATE INDEX tasks_workspace_roots_page ON tasks (workspace_id, created_at DESC, id DESC) WHERE parent_id IS NULL;
CREATE INDEX tasks_parent_page ON tasks (parent_id, created_at DESC, id DESC) WHERE parent_id IS NOT NULL;
CREATE INDEX tasks_workspace_status_page ON tasks (workspace_id, status, created_at DESC, id DESC);
-- The old single-column indexes are prefixes of the ones above.
DROP INDEX IF EXISTS tasks_workspace;
-- Workspaces page newest first too.
CREATE INDEX workspaces_page ON workspaces (created_at DESC, id DESC);
-- active_session_count per listed task.
CREATE INDEX sessions_task_active ON sessions (task_id) WHERE state IN ('CREATED', 'STARTING', 'RUNNING', 'WAITING_FOR_INPUT');

-- `q` (title contains, case-insensitive) through a trigram index. pg_trgm ships with PostgreSQL
-- (contrib) and is a trusted extension since 13, so the database owner may create it; both the
-- system PostgreSQL 15 and embedded-postgres have it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX tasks_title_trgm ON tasks USING gin (title gin_trgm_ops);

-- The transcript (R-8.2): one row per item, numbered per session by `seq` (gap-free, assigned
-- under the session's transcript_state row lock). Agent text is coalesced: chunks of one turn are
-- appended to the open agent_text item (transcript_state.open_seq) until another kind of item
-- arrives, the turn changes or the item reaches its cap (domain/transcript.ts, ADR 0022).
CREATE TABLE transcript_items (
  session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  seq bigint NOT NULL,
  turn_id uuid,
  role text NOT NULL,
  kind text NOT NULL,
  text text NOT NULL,
  meta jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, seq)
);

-- Per session: the next seq, what the transcript holds (bytes of text, items), whether it was cut,
-- and the open agent_text item chunks are appended to.
CREATE TABLE transcript_state (
  session_id uuid PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
  next_seq bigint NOT NULL DEFAULT 1,
  bytes bigint NOT NULL DEFAULT 0,
  items integer NOT NULL DEFAULT 0,
  truncated boolean NOT NULL DEFAULT false,
  open_seq bigint,
  open_turn_id uuid,
  open_bytes integer NOT NULL DEFAULT 0
);
