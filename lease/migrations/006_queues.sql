-- leasework: workers running
-- leasework: no transaction
-- Named queues, priorities, and pausing a queue.
--
-- Every event belongs to a queue ("default" unless enqueued into another)
-- and has a priority from 0, the default and the first to run, to 9. A
-- claim reads one queue: its READY rows through an index that starts with
-- the queue and the priority, one range per priority level, so its cost
-- depends neither on the backlog of other queues nor on rows not yet due;
-- and its expired leases through an index that starts with the queue.
--
-- A paused queue has a row in the queues table; the claim reads it by its
-- primary key and claims nothing from a paused queue.
--
-- Safe while workers run? Reads and writes go on throughout but for an
-- instant. Each statement is a transaction of its own (figures: a table
-- of 1,000,000 DONE rows on a busy two-core machine):
--   * the columns (constant defaults: no rewrite) and their checks (NOT
--     VALID: no row read) are added under ACCESS EXCLUSIVE, held for an
--     instant once granted (0.1 s; like any such lock it first waits for
--     the transactions that hold a lock on the table, and statements on
--     the table queue behind it meanwhile);
--   * the two indexes are built CONCURRENTLY, and the two they replace
--     dropped CONCURRENTLY, under SHARE UPDATE EXCLUSIVE: reads and writes
--     go on; each build reads the table twice (2.4 s and 1.4 s), and each
--     build and drop waits for the transactions older than it to end;
--   * the checks are validated under SHARE UPDATE EXCLUSIVE: reads and
--     writes go on while each reads the table (1.2 s for both).
-- Workers of an earlier version keep working, claiming from every queue,
-- but their claim has lost its index: upgrade them soon, and before
-- enqueueing into other queues. If it fails part-way, the next Migrate
-- runs it again from the start: the indexes are built again, the rest
-- finds its work done.

ALTER TABLE {{table}}
    ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0,
    DROP CONSTRAINT IF EXISTS {{name "priority_check"}},
    ADD CONSTRAINT {{name "priority_check"}} CHECK (priority BETWEEN 0 AND 9) NOT VALID,
    DROP CONSTRAINT IF EXISTS {{name "queue_check"}},
    ADD CONSTRAINT {{name "queue_check"}} CHECK (queue <> '' AND octet_length(queue) <= 128) NOT VALID;

-- Paused queues. A queue without a row runs.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "queues"}} (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

-- Due READY rows of a queue, by priority level, then in due order. (A
-- failed concurrent build leaves an invalid index: each is dropped first.)
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "queue_ready_idx"}};
CREATE INDEX CONCURRENTLY {{name "queue_ready_idx"}} ON {{table}} (queue, priority, next_attempt_at, id)
    WHERE status = 'READY';
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "ready_idx"}};

-- Expired leases of a queue, earliest first.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "queue_lease_idx"}};
CREATE INDEX CONCURRENTLY {{name "queue_lease_idx"}} ON {{table}} (queue, lease_until)
    WHERE status = 'INPROGRESS';
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "lease_idx"}};

ALTER TABLE {{table}} VALIDATE CONSTRAINT {{name "priority_check"}},
    VALIDATE CONSTRAINT {{name "queue_check"}};
