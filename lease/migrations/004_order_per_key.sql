-- leasework: workers running
-- leasework: no transaction
-- Order per key. Events that share a non-empty key are handled one at a time,
-- in the order their enqueuing transactions committed (and, within one
-- transaction, in insertion order). Only each key's head is ever READY,
-- INPROGRESS or FAILED; the events behind it wait in WAITING, which the
-- claim never reads, so the claim statement and its indexes are unchanged.
--
-- Two deferred triggers keep it so, on every write path:
--   * at the enqueuing transaction's COMMIT, each keyed row takes the key's
--     transaction-scoped advisory lock, gets its key_seq (commit order), and
--     becomes WAITING if its key already has a live (READY, INPROGRESS,
--     FAILED) or waiting row;
--   * at the COMMIT of a transaction that finished a key's live row (DONE,
--     DISCARDED, or deleted), the same lock is taken and, if the key has no
--     live row left, its waiting row with the lowest key_seq becomes READY
--     and idle workers are notified.
-- The lock is held from the start of the commit to its end, never across a
-- business transaction. Each trigger reads in a statement begun after it
-- holds the lock; PostgreSQL makes a commit visible before it releases the
-- committing transaction's locks, so the second of two racing commits always
-- sees the first. That needs a fresh snapshot per statement: the triggers
-- refuse REPEATABLE READ and SERIALIZABLE transactions on keyed rows.
--
-- Safe while workers run? Reads go on throughout but for an instant;
-- writes wait only while the live keyed rows are put in order. Each
-- statement is a transaction of its own (figures: a table of 1,000,000
-- DONE rows and 1,200 live ones, 333 of them keyed, on a busy two-core
-- machine):
--   * the column key_seq (no default: no rewrite) and the wider status
--     check (NOT VALID: no row read) are added under ACCESS EXCLUSIVE, held
--     for an instant once granted (61 ms; like any such lock it first
--     waits for the transactions that hold a lock on the table, and
--     statements on the table queue behind it meanwhile);
--   * the two partial indexes are built CONCURRENTLY, under SHARE UPDATE
--     EXCLUSIVE: reads and writes go on; each build reads the table twice
--     (2.3 s and 1.2 s) and waits for the transactions older than it to end;
--   * the status check is validated under SHARE UPDATE EXCLUSIVE: reads
--     and writes go on while it reads the table (0.6 s);
--   * last, under SHARE ROW EXCLUSIVE (writes wait, reads go on), rows of a
--     key enqueued before this step are put in order by id (the first live
--     one stays, the later READY ones wait) and the triggers are created
--     (0.15 s). The live keyed rows are read through the new index, so
--     writes wait for a time that grows with the keyed backlog, not with
--     the history.
-- If it fails part-way, the next Migrate runs it again from the start: the
-- indexes are built again, the rest finds its work done.

ALTER TABLE {{table}}
    ADD COLUMN IF NOT EXISTS key_seq bigint,
    DROP CONSTRAINT IF EXISTS {{name "status_check"}},
    ADD CONSTRAINT {{name "status_check"}}
        CHECK (status IN ('READY', 'INPROGRESS', 'DONE', 'FAILED', 'WAITING', 'DISCARDED')) NOT VALID;

-- The order of a key's rows: drawn from the sequence when the enqueuing
-- transaction commits. NULL for keyless rows and, until their commit, for
-- rows not yet committed.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.{{name "key_seq"}};

-- A key's waiting rows in order: the promotion reads the first. (A failed
-- concurrent build leaves an invalid index: each is dropped first.)
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "waiting_idx"}};
CREATE INDEX CONCURRENTLY {{name "waiting_idx"}} ON {{table}} (key, key_seq) WHERE status = 'WAITING';

-- A key's live rows: "does this key have a head?"
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "live_key_idx"}};
CREATE INDEX CONCURRENTLY {{name "live_key_idx"}} ON {{table}} (key)
    WHERE status IN ('READY', 'INPROGRESS', 'FAILED') AND key IS NOT NULL;

ALTER TABLE {{table}} VALIDATE CONSTRAINT {{name "status_check"}};

-- lock_key takes the key's transaction-scoped advisory lock, after refusing
-- a transaction whose statements would not see the commits that released it.
--
-- Deadlocks: an enqueue takes its keys' locks in key order (Store.Enqueue
-- inserts in key order), so two enqueues never wait for each other in a
-- circle. A transaction that finishes rows of several keys (a batch of
-- completions) meets them in another order; it waits for the first key's
-- lock like anyone (holding no key lock, it closes no circle), but for a
-- later key it only tries for a short while, then gives way with SQLSTATE
-- 55P03 (lock_not_available) instead of closing a circle with an enqueue:
-- its transaction rolls back, and its outcomes are written again one key
-- per transaction (the framework writes a failed batch again claim by
-- claim). The enqueue is never the one to fail. A transaction that both
-- finishes and enqueues keyed rows of different keys can still deadlock with
-- an enqueue; PostgreSQL's deadlock detector then aborts one of them.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "lock_key"}}(tbl text, k text, give_way boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    h bigint := hashtextextended('leasework-key:' || tbl || ':' || k, 0);
    held integer := COALESCE(NULLIF(current_setting('leasework.key_locks', true), ''), '0')::integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'leasework: events with a key need READ COMMITTED transactions, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Enqueue and finish keyed events in READ COMMITTED transactions, PostgreSQL''s default (see default_transaction_isolation).';
    END IF;
    IF held = 0 OR NOT give_way THEN
        PERFORM pg_advisory_xact_lock(h);
    ELSE
        FOR i IN 1..20 LOOP
            EXIT WHEN pg_try_advisory_xact_lock(h);
            IF i = 20 THEN
                RAISE EXCEPTION 'leasework: key % is being committed by another transaction; this transaction finishes events of several keys and gives way rather than risk a deadlock', k
                    USING ERRCODE = 'lock_not_available',
                          HINT = 'Nothing was written: write the outcomes again, one transaction per key.';
            END IF;
            PERFORM pg_sleep(0.005);
        END LOOP;
    END IF;
    PERFORM set_config('leasework.key_locks', (held + 1)::text, true);
END
$$;

-- settle_key runs under the key's lock, in a statement begun after it was
-- taken: if the key has no live row, its first waiting row becomes READY
-- (due at its RunAt, or now) and idle workers are woken. A row of the current
-- transaction whose own commit-time step has not run yet (key_seq still
-- NULL) does not count as live: that step will put it in line.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "settle_key"}}(k text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    WITH first AS (
        SELECT id FROM {{table}}
        WHERE key = k AND status = 'WAITING'
          AND NOT EXISTS (SELECT 1 FROM {{table}}
                          WHERE key = k AND status IN ('READY', 'INPROGRESS', 'FAILED')
                            AND key_seq IS NOT NULL)
        ORDER BY key_seq
        LIMIT 1
        FOR UPDATE
    ), promoted AS (
        UPDATE {{table}} AS o
        SET status = 'READY', next_attempt_at = greatest(o.next_attempt_at, statement_timestamp()),
            updated_at = statement_timestamp()
        FROM first WHERE o.id = first.id
        RETURNING o.kind
    )
    SELECT count(*) INTO n FROM promoted, LATERAL pg_notify({{channel}}, promoted.kind);
END
$$;

-- At the enqueuing transaction's commit: put the new row in line behind its
-- key. Its own row is re-read by id: the row as inserted may have changed
-- since in the same transaction.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "order_key"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {{schema}}.{{name "lock_key"}}(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, NEW.key, false);
    UPDATE {{table}} AS o
    SET key_seq = nextval('{{schema}}.{{name "key_seq"}}'),
        status = CASE WHEN o.status = 'READY' AND (
                EXISTS (SELECT 1 FROM {{table}} AS e
                        WHERE e.key = NEW.key AND e.status IN ('READY', 'INPROGRESS', 'FAILED')
                          AND e.key_seq IS NOT NULL AND e.id <> NEW.id)
                OR EXISTS (SELECT 1 FROM {{table}} AS e
                           WHERE e.key = NEW.key AND e.status = 'WAITING' AND e.id <> NEW.id))
            THEN 'WAITING' ELSE o.status END
    WHERE o.id = NEW.id AND o.key_seq IS NULL;
    PERFORM {{schema}}.{{name "settle_key"}}(NEW.key);
    RETURN NULL;
END
$$;

-- At the commit of a transaction that finished a live keyed row.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_key"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {{schema}}.{{name "lock_key"}}(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, OLD.key, true);
    PERFORM {{schema}}.{{name "settle_key"}}(OLD.key);
    RETURN NULL;
END
$$;
-- Rows enqueued before this step, and the triggers, in one transaction
-- that writes wait for: a row inserted after the triggers exist is put in
-- line by them, one inserted before is put in line here. Live keyed rows
-- get their order by id, and every READY one with an earlier live row of
-- its key waits. They are read through live_key_idx and written by id,
-- whatever the table's statistics say.
DO $$
DECLARE
    r record;
BEGIN
    LOCK TABLE {{table}} IN SHARE ROW EXCLUSIVE MODE;
    SET LOCAL enable_seqscan = off;
    FOR r IN SELECT id FROM {{table}}
             WHERE key IS NOT NULL AND key_seq IS NULL AND status IN ('READY', 'INPROGRESS', 'FAILED')
             ORDER BY id
    LOOP
        UPDATE {{table}} SET key_seq = nextval('{{schema}}.{{name "key_seq"}}') WHERE id = r.id;
    END LOOP;
    UPDATE {{table}} SET status = 'WAITING', updated_at = statement_timestamp()
    WHERE id = ANY (ARRAY(
        SELECT o.id FROM {{table}} AS o
        WHERE o.key IS NOT NULL AND o.status = 'READY'
          AND EXISTS (SELECT 1 FROM {{table}} AS e
                      WHERE e.key = o.key AND e.key_seq < o.key_seq
                        AND e.status IN ('READY', 'INPROGRESS', 'FAILED'))));

    -- A trigger of this name on this table is this step's, from a run
    -- that failed after this statement's commit.
    BEGIN
        CREATE CONSTRAINT TRIGGER {{name "order_key"}}
            AFTER INSERT ON {{table}}
            DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (NEW.key IS NOT NULL)
            EXECUTE FUNCTION {{schema}}.{{name "order_key"}}();
    EXCEPTION WHEN duplicate_object THEN NULL;
    END;
    BEGIN
        CREATE CONSTRAINT TRIGGER {{name "release_key"}}
            AFTER UPDATE ON {{table}}
            DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED')
                               AND NEW.status IN ('DONE', 'DISCARDED'))
            EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();
    EXCEPTION WHEN duplicate_object THEN NULL;
    END;
    BEGIN
        CREATE CONSTRAINT TRIGGER {{name "release_key_delete"}}
            AFTER DELETE ON {{table}}
            DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED'))
            EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();
    EXCEPTION WHEN duplicate_object THEN NULL;
    END;
END
$$;
