-- leasework: workers running
-- An insert of events without a partition pays next to nothing for fair
-- scheduling.
--
-- Migration 22 wrote a fair queue's arrivals from a statement trigger of
-- its own, fair_arrive, which fired after every insert, whatever its rows:
-- a call with the owner's rights and a search_path of its own, and a probe
-- of fair_weights. Server time of an insert of one event without a
-- partition, no queue fair (PostgreSQL 15, busy two-core machine, medians
-- of 100 interleaved runs of 200 inserts each): 64.5 µs without
-- fair_arrive, 75.5 with it.
--
-- The arrival step moves into the notify trigger (migration 2), which
-- every insert fires anyway and which reads the same transition table:
-- an EXISTS, which stops at the first READY row with a partition, and
-- only when there is one an aggregate of those rows and a call of
-- fair_arrive_many, which writes what fair_arrive wrote: an arrival per
-- partition of a fair queue inserted into, due at its earliest row. The
-- same insert now takes 67.4 µs (the EXISTS is the 3 µs). An insert with
-- a partition pays more than it did: 88 µs against 78 outside a fair
-- queue, 118 against 99 in one (the aggregate and the call, where
-- fair_arrive was a call); a statement of 1,000 events, 10 partitions,
-- the same within 3%, fair queue or not (12.7 against 12.3 ms; 13.2
-- against 13.0). Each statement still writes one arrival a partition, so
-- a bulk insert gives a fair queue's claims no more to read.
--
-- Guarantees kept (migration 22): every partition's READY rows of a fair
-- queue bring an arrival with them, which commits with them; a producer
-- only appends arrivals, never waits for a claim nor for another
-- producer. fair_arrive_many runs with its owner's rights, every name in
-- it qualified, its search_path set: a producer's role needs no grant on
-- the tables of fair scheduling. notify runs with the producer's rights,
-- as before, and reads only the transition table. EXECUTE on
-- fair_arrive_many is granted to PUBLIC (whatever the owner's default
-- privileges), so a producer needs no grant for it either; called by
-- anyone, it writes an arrival only for a queue that is fair and a
-- partition that a row of the table (the one whose id it is given) has
-- in that queue: nothing a producer's insert could not bring.
--
-- Safe while workers run? Yes. The step runs in one transaction, so no
-- insert commits between the drop of fair_arrive and the new notify: each
-- brings its arrivals once. DROP TRIGGER takes ACCESS EXCLUSIVE on the
-- table, which blocks its reads and writes, until the step commits: a
-- catalog change of a few milliseconds. To get it, the step first waits
-- for the transactions using the table (a producer's open transaction,
-- say), and the table's statements queue behind it while it waits: run it
-- when no long transaction holds the table. The functions lock nothing of
-- the table. No row is read. Workers and producers of an earlier version
-- keep working: claims read the arrivals as before.

DROP TRIGGER IF EXISTS {{name "fair_arrive"}} ON {{table}};
DROP FUNCTION IF EXISTS {{schema}}.{{name "fair_arrive"}}();

-- The arrivals of rows inserted: ids, queues, partitions and due times,
-- one entry a READY row with a partition. One arrival per partition of a
-- fair queue, due at its earliest row; none when no queue is fair (one
-- probe). The partition's row is looked up by id (a primary-key probe a
-- partition, in a scalar subquery: never a join that reads the table).
CREATE OR REPLACE FUNCTION {{schema}}.{{name "fair_arrive_many"}}(ids bigint[], queues text[], partitions text[], due timestamptz[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT true FROM {{schema}}.{{name "fair_weights"}} ORDER BY queue, partition LIMIT 1) IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO {{schema}}.{{name "fair_arrivals"}} (queue, partition, due_at)
    SELECT g.queue, g.partition, g.due
    FROM (SELECT r.queue, r.partition, min(r.at) AS due, min(r.id) AS id
          FROM unnest(ids, queues, partitions, due) AS r(id, queue, partition, at)
          WHERE r.partition IS NOT NULL AND r.at IS NOT NULL
          GROUP BY r.queue, r.partition) AS g
    WHERE EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_weights"}} AS w WHERE w.queue = g.queue AND w.partition = '')
      AND (SELECT true FROM {{table}} AS o
           WHERE o.id = g.id AND o.queue = g.queue AND o.partition_key = g.partition) IS NOT NULL;
END
$$;

-- Its plans are generic, made once a session: a custom plan of the
-- insert at each call, which the server would choose for arrays of a row
-- or two, cost 150 µs, twice what the producer's insert costs.
ALTER FUNCTION {{schema}}.{{name "fair_arrive_many"}}(bigint[], text[], text[], timestamptz[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan;
GRANT EXECUTE ON FUNCTION {{schema}}.{{name "fair_arrive_many"}}(bigint[], text[], text[], timestamptz[]) TO PUBLIC;

-- notify as migration 2 made it, and the arrivals of the READY rows
-- inserted that have a partition, when there are some. Whether there are
-- is an EXISTS, which stops at the first such row: for an insert without
-- one it costs nothing measurable (an aggregate of the rows, there or
-- not, cost 2 µs a statement).
CREATE OR REPLACE FUNCTION {{schema}}.{{name "notify"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], k.kind) FROM (SELECT DISTINCT kind FROM inserted) AS k;
    IF EXISTS (SELECT FROM inserted AS i WHERE i.partition_key IS NOT NULL AND i.status = 'READY') THEN
        PERFORM {{schema}}.{{name "fair_arrive_many"}}(array_agg(i.id), array_agg(i.queue), array_agg(i.partition_key), array_agg(i.next_attempt_at))
        FROM inserted AS i
        WHERE i.partition_key IS NOT NULL AND i.status = 'READY';
    END IF;
    RETURN NULL;
END
$$;
