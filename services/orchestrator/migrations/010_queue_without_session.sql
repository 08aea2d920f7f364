-- R-10.2: a message for a member of a paused tree is stored, never refused. Such a task has no
-- session to queue it to (the pause cancelled them, or it never had one), so a queued message may
-- name none: the task's next session delivers it, as it delivers every message of the task's queue.
ALTER TABLE queued_messages ALTER COLUMN session_id DROP NOT NULL;
