-- leasework: workers running
-- leasework: no transaction
-- The index of the attempts counted under a concurrency limit, by lease
-- deadline: a claim without floors (a sweep) reads the ones whose lease
-- ran out, to take their places (migration 17), and nothing else.
--
-- Safe while workers run? Yes. The index is built CONCURRENTLY, outside a
-- transaction: reads and writes go on while it reads the table (twice).
-- Rerunning the step after a failure part-way is safe; the index is
-- dropped and built again.

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "limit_holders_idx"}};
CREATE INDEX CONCURRENTLY {{name "limit_holders_idx"}} ON {{table}} (lease_until)
    WHERE status = 'INPROGRESS' AND (kind_slot IS NOT NULL OR queue_slot IS NOT NULL);
