-- leasework: workers running
-- Retention deletes DONE rows, oldest first, and keeps FAILED rows until an
-- operator repairs them. The index it reads holds DONE rows only: the old
-- index also held every FAILED row, so on a table with many failures the
-- retention statement read them all (or the whole table) to find the few
-- DONE rows.
--
-- Safe while workers run? Writes wait while the index builds; reads go on
-- but for an instant at the end. The build is a plain CREATE INDEX, under
-- SHARE (writes wait, reads go on), and reads the whole table once (3 to
-- 9 s on a table of 1,000,000 DONE rows, a busy two-core machine); the old
-- index is then dropped under ACCESS EXCLUSIVE, which first waits for the
-- statements running on the table (later ones queue behind it) and is
-- held, reading no row, until the step commits right after (about 0.1 s
-- on the same table and machine). On a large
-- table run it at a quiet time, or first run by hand, outside a
-- transaction:
--   CREATE INDEX CONCURRENTLY <table>_done_idx ON <schema>.<table> (finished_at) WHERE status = 'DONE';
-- and this step then only drops the old index. Rerunning it is a no-op.
CREATE INDEX IF NOT EXISTS {{name "done_idx"}} ON {{table}} (finished_at) WHERE status = 'DONE';

DROP INDEX IF EXISTS {{schema}}.{{name "finished_idx"}};
