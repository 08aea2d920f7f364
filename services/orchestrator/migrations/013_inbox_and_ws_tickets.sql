-- The inbox (R-12.2): every pending question bundle and permission request of a workspace, oldest
-- first. Partial indexes: a workspace's pending rows are few, whatever its history.
CREATE INDEX clarification_bundles_pending_workspace ON clarification_bundles (workspace_id, created_at) WHERE status = 'pending';
CREATE INDEX permission_requests_pending_workspace ON permission_requests (workspace_id, created_at) WHERE status = 'pending';

-- Single use of /ws tickets (ADR 0058): a ticket's jti is inserted on its first use, and a second
-- insert of the same jti finds it. Rows past expires_at are deleted by the next insert, so the
-- table holds about 30 s of tickets.
CREATE TABLE ws_ticket_uses (
  jti text PRIMARY KEY,
  operator text NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ws_ticket_uses_expiry ON ws_ticket_uses (expires_at);
