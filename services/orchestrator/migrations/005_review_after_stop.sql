-- R-1.4: the REVIEW transition after an accepted stop, with its event's outbox row, as one
-- statement that cannot abort the stop's transaction. The stop sends it in its last flight, with
-- its other writes and COMMIT (one round trip for all of them); should it fail, the exception
-- block (a subtransaction, as a savepoint would be) undoes it alone, no event is staged, the
-- accepted stops stand, and the unchanged row comes back so the caller can tell and log it.
-- The write is updateTaskFields' for a status (store/tasks.ts): REVIEW, no cancellation time,
-- updated now. p_event is the outbox row (id, subject, payload, trace) of its task.state_changed.
CREATE FUNCTION review_after_stop(p_task_id uuid, p_event jsonb) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY UPDATE tasks SET status = 'REVIEW', cancelled_at = NULL, updated_at = now() WHERE id = p_task_id RETURNING *;
  INSERT INTO outbox (id, subject, payload, trace) VALUES (p_event->>'id', p_event->>'subject', p_event->'payload', COALESCE(p_event->'trace', '{}'::jsonb));
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'review_after_stop(%) failed: % (%)', p_task_id, SQLERRM, SQLSTATE;
  RETURN QUERY SELECT * FROM tasks WHERE id = p_task_id;
END $$;
