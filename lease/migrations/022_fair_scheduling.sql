-- leasework: workers running
-- Fair scheduling across partitions, and priority aging.
--
-- A queue is fair when fair_weights has its default weight (partition
-- ''); a row of another partition overrides the default for that
-- partition. Within a priority level, the claims of a fair queue take its
-- events across partitions in proportion to their weights, by stride
-- scheduling: each partition with due events has a row in fair_keys whose
-- pass grows by 1 / weight for each event claimed of it (written by the
-- next claim that can lock it, SKIP LOCKED, as a debt in fair_debts
-- until then: no claim waits for another), and a claim takes
-- the events that keep the passes level (the partitions furthest behind
-- first). A partition that had no due events joins at the lowest pass of
-- the queue's partitions, so an idle partition saves no credit, and a new
-- one waits behind no one's backlog.
--
-- A partition joins through fair_arrivals: the enqueue's statement
-- trigger writes one row per partition of a fair queue it inserted into,
-- and a row trigger one for each row made READY again of a partition (a
-- retry, a snooze, a release, a key's next event, a row set aside that
-- comes back, a requeue), due when the row is. Producers only insert:
-- they never wait for a claim, nor one for another. A claim takes the due
-- arrivals of its queue and reads their partitions' events at once. A
-- partition whose events a claim finds none due of leaves fair_keys; if
-- it still has READY events due later, an arrival due then brings it
-- back. A row of a partition that left by a race (made READY by a
-- transaction that commits after the claim's snapshot) has its arrival,
-- which commits with it.
--
-- Events of no partition, and of a partition not (yet) in fair_keys, are
-- still claimed, in the queue's order, behind the fair ones: nothing
-- waits for fair_keys to know it.
--
-- queue_aging holds, per queue, how long a due row waits before it is
-- taken as one priority level higher (a lower number).
--
-- Safe while workers run? The new tables and functions lock nothing of the
-- events table. CREATE TRIGGER takes SHARE ROW EXCLUSIVE on it, which
-- blocks its writes (reads go on), and ALTER TABLE of limit_changes ACCESS
-- EXCLUSIVE on that table, until the step commits: a catalog change of a
-- few milliseconds. No row is read. The index the claims read is built by
-- the next step, concurrently. Workers of an earlier version keep working
-- and schedule no queue fairly: upgrade every worker before declaring a
-- weight.

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "fair_weights"}} (
    queue     text    NOT NULL,
    -- The partition, or '' for the queue's default.
    partition text    NOT NULL CHECK (octet_length(partition) <= 1024),
    weight    integer NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    set_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by    text    NOT NULL DEFAULT '',
    PRIMARY KEY (queue, partition)
);

-- The partitions of fair queues with due events, each with its pass.
-- Written by claims only.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "fair_keys"}} (
    queue     text   NOT NULL,
    partition text   NOT NULL,
    pass      double precision NOT NULL,
    PRIMARY KEY (queue, partition),
    -- The claim's order: the partitions furthest behind first.
    UNIQUE (queue, pass, partition)
);

-- What claims owe to the passes of partitions another claim held: added
-- to the pass by the next claim that locks it.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "fair_debts"}} (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue     text   NOT NULL,
    partition text   NOT NULL,
    pass      double precision NOT NULL,
    UNIQUE (queue, partition, id)
);

-- Partitions of fair queues that have, or will have at due_at, READY
-- events: appended by producers and by the statements that make a row
-- READY, taken by claims.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "fair_arrivals"}} (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue     text   NOT NULL,
    partition text   NOT NULL,
    due_at    timestamptz NOT NULL,
    -- The claim's order: the earliest due first.
    UNIQUE (queue, due_at, id)
);

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "queue_aging"}} (
    queue    text   PRIMARY KEY,
    after_us bigint NOT NULL CHECK (after_us BETWEEN 1000 AND 31536000000000),
    set_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by   text   NOT NULL DEFAULT ''
);

-- A weight's change names its partition.
ALTER TABLE {{schema}}.{{name "limit_changes"}} ADD COLUMN IF NOT EXISTS partition text;

-- After each insert: an arrival per partition of a fair queue inserted
-- into, due at its earliest row. One probe when no queue is fair.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "fair_arrive"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT true FROM {{schema}}.{{name "fair_weights"}} ORDER BY queue, partition LIMIT 1) IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO {{schema}}.{{name "fair_arrivals"}} (queue, partition, due_at)
    SELECT i.queue, i.partition_key, min(i.next_attempt_at) FROM inserted AS i
    WHERE i.partition_key IS NOT NULL AND i.status = 'READY'
      AND EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_weights"}} AS w WHERE w.queue = i.queue AND w.partition = '')
    GROUP BY i.queue, i.partition_key;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "fair_arrive"}} ON {{table}};
CREATE TRIGGER {{name "fair_arrive"}}
    AFTER INSERT ON {{table}}
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{name "fair_arrive"}}();

-- After a row of a partition becomes READY again: its arrival, due when
-- the row is, if its queue is fair.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "fair_again"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.{{name "fair_arrivals"}} (queue, partition, due_at)
    SELECT NEW.queue, NEW.partition_key, NEW.next_attempt_at
    WHERE EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_weights"}} AS w WHERE w.queue = NEW.queue AND w.partition = '');
    RETURN NULL;
END
$$;

-- Both run with their owner's rights, as forget_event_ids does
-- (migration 8): a producer's role, or an operator's, needs no grant on
-- the tables of fair scheduling. Every name in them is qualified.
ALTER FUNCTION {{schema}}.{{name "fair_arrive"}}() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.{{name "fair_again"}}() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

DROP TRIGGER IF EXISTS {{name "fair_again"}} ON {{table}};
CREATE TRIGGER {{name "fair_again"}}
    AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN (NEW.status = 'READY' AND OLD.status <> 'READY' AND NEW.partition_key IS NOT NULL)
    EXECUTE FUNCTION {{schema}}.{{name "fair_again"}}();
