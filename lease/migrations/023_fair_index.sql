-- leasework: workers running
-- leasework: no transaction
-- The index a claim of a fair queue (migration 22) reads a partition's
-- due events through: the READY rows of a partition, in the claim's order
-- within the partition. Only rows with a partition are in it.
--
-- Safe while workers run? Yes. The index is built CONCURRENTLY, outside a
-- transaction: reads and writes go on while it reads the table (twice).
-- Rerunning the step after a failure part-way is safe; the index is
-- dropped and built again.

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "fair_ready_idx"}};
CREATE INDEX CONCURRENTLY {{name "fair_ready_idx"}} ON {{table}} (queue, partition_key, priority, next_attempt_at, id)
    WHERE status = 'READY' AND partition_key IS NOT NULL;
