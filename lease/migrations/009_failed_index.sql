-- leasework: workers running
-- FAILED rows by finish time.
--
-- The retention index covers DONE rows only (migration 3), so reading what
-- failed recently (the operator console's last hour) scanned the whole
-- table, history included. FAILED rows are few and rarely change, so this
-- index costs writes next to nothing.
--
-- Safe while workers run? Writes wait while the index builds; reads go
-- on. It is a plain CREATE INDEX, under SHARE (writes wait, reads go on)
-- until the step commits, and reads the whole table once (1.1 to 1.8 s on
-- a table of 1,000,000 DONE rows, a busy two-core machine): on a large
-- table, run it at a quiet time, or first create
--   CREATE INDEX CONCURRENTLY <table>_failed_idx ON <schema>.<table> (finished_at) WHERE status = 'FAILED';
-- by hand, which this step then finds.

CREATE INDEX IF NOT EXISTS {{name "failed_idx"}} ON {{table}} (finished_at) WHERE status = 'FAILED';
