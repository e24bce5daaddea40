-- leasework: workers running
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
-- Safe while workers run? It takes a lock that blocks every write to the
-- table while it adds a column (no rewrite), backfills the live keyed rows
-- and builds two partial indexes over them; on a table with a large keyed
-- backlog run it at a quiet time. Rows of a key enqueued before it are put in
-- order by id: the first live one stays, the later READY ones wait. Rerunning
-- it is a no-op.

ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "status_check"}};
ALTER TABLE {{table}} ADD CONSTRAINT {{name "status_check"}}
    CHECK (status IN ('READY', 'INPROGRESS', 'DONE', 'FAILED', 'WAITING', 'DISCARDED'));

-- The order of a key's rows: drawn from the sequence when the enqueuing
-- transaction commits. NULL for keyless rows and, until their commit, for
-- rows not yet committed.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS key_seq bigint;
CREATE SEQUENCE IF NOT EXISTS {{schema}}.{{name "key_seq"}};

-- Rows enqueued before this migration: live keyed rows get their order by id,
-- and every READY one with an earlier live row of its key waits.
UPDATE {{table}} AS o SET key_seq = s.seq
FROM (SELECT id, nextval('{{schema}}.{{name "key_seq"}}') AS seq
      FROM (SELECT id FROM {{table}}
            WHERE key IS NOT NULL AND key_seq IS NULL AND status IN ('READY', 'INPROGRESS', 'FAILED')
            ORDER BY id) AS ordered) AS s
WHERE o.id = s.id;
UPDATE {{table}} AS o SET status = 'WAITING', updated_at = statement_timestamp()
WHERE o.key IS NOT NULL AND o.status = 'READY'
  AND EXISTS (SELECT 1 FROM {{table}} AS e
              WHERE e.key = o.key AND e.key_seq < o.key_seq
                AND e.status IN ('READY', 'INPROGRESS', 'FAILED'));

-- A key's waiting rows in order: the promotion reads the first.
CREATE INDEX IF NOT EXISTS {{name "waiting_idx"}} ON {{table}} (key, key_seq) WHERE status = 'WAITING';

-- A key's live rows: "does this key have a head?"
CREATE INDEX IF NOT EXISTS {{name "live_key_idx"}} ON {{table}} (key)
    WHERE status IN ('READY', 'INPROGRESS', 'FAILED') AND key IS NOT NULL;

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
DROP TRIGGER IF EXISTS {{name "order_key"}} ON {{table}};
CREATE CONSTRAINT TRIGGER {{name "order_key"}}
    AFTER INSERT ON {{table}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.key IS NOT NULL)
    EXECUTE FUNCTION {{schema}}.{{name "order_key"}}();

DROP TRIGGER IF EXISTS {{name "release_key"}} ON {{table}};
CREATE CONSTRAINT TRIGGER {{name "release_key"}}
    AFTER UPDATE ON {{table}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED')
                       AND NEW.status IN ('DONE', 'DISCARDED'))
    EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();

DROP TRIGGER IF EXISTS {{name "release_key_delete"}} ON {{table}};
CREATE CONSTRAINT TRIGGER {{name "release_key_delete"}}
    AFTER DELETE ON {{table}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED'))
    EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();
