-- leasework: workers running
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
-- Safe while workers run? Adding the columns rewrites nothing (their
-- defaults are constants); the two indexes are built while writes to the
-- table wait. Workers of an earlier version keep working, claiming from
-- every queue, but their claim has lost its index: upgrade them soon, and
-- before enqueueing into other queues.

ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default';
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "priority_check"}};
ALTER TABLE {{table}} ADD CONSTRAINT {{name "priority_check"}} CHECK (priority BETWEEN 0 AND 9);
ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "queue_check"}};
ALTER TABLE {{table}} ADD CONSTRAINT {{name "queue_check"}}
    CHECK (queue <> '' AND octet_length(queue) <= 128);

-- Due READY rows of a queue, by priority level, then in due order.
CREATE INDEX IF NOT EXISTS {{name "queue_ready_idx"}} ON {{table}} (queue, priority, next_attempt_at, id)
    WHERE status = 'READY';
DROP INDEX IF EXISTS {{schema}}.{{name "ready_idx"}};

-- Expired leases of a queue, earliest first.
CREATE INDEX IF NOT EXISTS {{name "queue_lease_idx"}} ON {{table}} (queue, lease_until)
    WHERE status = 'INPROGRESS';
DROP INDEX IF EXISTS {{schema}}.{{name "lease_idx"}};

-- Paused queues. A queue without a row runs.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "queues"}} (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
