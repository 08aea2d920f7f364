-- R-1.4's REVIEW after a stop is written by the one writer of a task's status (changeTaskStatus,
-- updateTaskFields), in a savepoint of the stop's transaction, and its event is built from the row
-- that write returns (flows/review.ts, ADR 0075). The function of migration 005 wrote the same
-- transition a second way from an event predicted before the write; nothing calls it any more.
DROP FUNCTION IF EXISTS review_after_stop(uuid, jsonb);
