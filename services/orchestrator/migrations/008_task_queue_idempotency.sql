-- Queued messages belong to their task (R-1.6): a stop leaves them stored and the task's next
-- session delivers them, oldest first. `session_id` stays as the session the message was queued
-- to (history); delivery reads the task's queue through this index, claiming each row under its
-- row lock (SELECT ... FOR UPDATE SKIP LOCKED, then DELETE in the same transaction), so a message
-- is delivered once whichever replica, session or restart gets to it.
CREATE INDEX queued_messages_task ON queued_messages (task_id, position);

-- Idempotency-Key on POST /tasks/:id/sessions and POST /sessions/:id/prompt reuses idempotency_keys
-- (004): the key row is written in the transaction that inserts the session (or the turn), so a
-- retry finds it exactly when the first request's effect exists. Keys are purged by age
-- (IDEMPOTENCY_KEEP_MS, housekeeping of the reconciler): this index serves that purge.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
