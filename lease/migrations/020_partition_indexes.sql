-- leasework: workers running
-- leasework: no transaction
-- The indexes of partition limits (migration 19): the rows a full
-- partition set aside, by partition in the claim's order, which
-- wake_partitions reads to make them READY again; and the attempts counted
-- in a partition's slot, by lease deadline, which a sweep reads to take
-- the places of those whose lease ran out.
--
-- Safe while workers run? Yes. The indexes are built CONCURRENTLY,
-- outside a transaction: reads and writes go on while each reads the
-- table (twice). Rerunning the step after a failure part-way is safe;
-- each index is dropped and built again.

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "set_aside_idx"}};
CREATE INDEX CONCURRENTLY {{name "set_aside_idx"}} ON {{table}} (partition_key, priority, next_attempt_at, id)
    WHERE status = 'WAITING' AND key IS NULL;

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "partition_holders_idx"}};
CREATE INDEX CONCURRENTLY {{name "partition_holders_idx"}} ON {{table}} (lease_until)
    WHERE status = 'INPROGRESS' AND partition_slot IS NOT NULL;
