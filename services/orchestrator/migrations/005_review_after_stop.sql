-- R-1.4: the REVIEW transition after an accepted stop, as one statement that cannot abort the
-- stop's transaction. The stop sends it in the same flight as its own writes (one round trip for
-- all of them); should it fail, the exception block (a subtransaction, as a savepoint would be)
-- undoes it alone, the accepted stops stand, and the unchanged row comes back so the caller can
-- tell and log it. The write is updateTaskFields' for a status (store/tasks.ts): REVIEW, no
-- cancellation time, updated now.
CREATE FUNCTION review_after_stop(p_task_id uuid) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY UPDATE tasks SET status = 'REVIEW', cancelled_at = NULL, updated_at = now() WHERE id = p_task_id RETURNING *;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'review_after_stop(%) failed: % (%)', p_task_id, SQLERRM, SQLSTATE;
  RETURN QUERY SELECT * FROM tasks WHERE id = p_task_id;
END $$;
