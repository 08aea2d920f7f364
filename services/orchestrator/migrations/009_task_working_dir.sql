-- R-9.1: a task may name its agents' working directory (absolute, under KANDEV_WORK_DIR, checked by
-- the orchestrator at creation and by lifecycle again at launch). NULL = lifecycle's default,
-- <KANDEV_WORK_DIR>/<workspace_id>/<task_id>.
ALTER TABLE tasks ADD COLUMN working_dir text;
