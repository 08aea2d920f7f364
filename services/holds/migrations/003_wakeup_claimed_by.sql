-- Which holds instance holds a wakeup's claim (ADR 0037): it renews the claim while the launch
-- runs, and an operator (or a test) can tell whose claim went stale.
ALTER TABLE wakeups ADD COLUMN claimed_by text;
