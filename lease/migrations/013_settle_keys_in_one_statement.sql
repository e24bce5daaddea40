-- leasework: workers running
-- A batch of completions passes its keys on in one statement.
--
-- The commit-time trigger of migration 4 settles each finished keyed row
-- on its own: per row, a function call that takes the key's lock and one
-- that promotes the key's next event, an UPDATE statement each. A batch
-- of 500 completions over 500 keys spent 110 ms at COMMIT that way (220 µs
-- a row), most of it starting 500 one-row UPDATEs, against 10 ms for the
-- completion itself.
--
-- settle_keys does the same for many keys at once, at the end of the
-- store's own completions, each one statement that commits alone, with
-- the keys of every row the statement finished. It marks the transaction
-- (leasework.keys_passed), takes the keys' locks in key order (waiting for
-- the first like anyone; for each later one it tries for a short while,
-- then gives way with SQLSTATE 55P03, as lock_key does), then, in a
-- statement begun after it holds them all, makes each key's first waiting
-- row READY where the key has no live row left, in one UPDATE, and wakes
-- idle workers once per kind. The rule is settle_key's, key by key; only
-- the number of statements changes: the same 500 completions take 35 to
-- 55 ms this way, the completion included. The locks are held from the end of
-- the statement to its commit, as the trigger holds them during the
-- commit, and never across anything else.
--
-- The release triggers still fire for those rows at COMMIT, and return at
-- once in a marked transaction. Every other write path (a discard, a
-- cancel, an operator's UPDATE or DELETE, a completion in a handler's own
-- transaction, a worker of an earlier version) leaves the mark off, and
-- its rows are settled at COMMIT by the triggers, with lock_key and
-- settle_key, as before (for one key they cost half what settle_keys
-- does). settle_keys is the store's own: a transaction that calls it and
-- finishes keyed rows it does not name leaves their keys' next events
-- waiting.
--
-- Safe while workers run? Yes: functions are replaced, nothing else; no
-- table lock, no row read.

CREATE OR REPLACE FUNCTION {{schema}}.{{name "settle_keys"}}(ks text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    -- The name the key locks hash, as the triggers give it to lock_key
    -- (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME).
    tbl text := {{keyLockTable}};
    held integer := COALESCE(NULLIF(current_setting('leasework.key_locks', true), ''), '0')::integer;
    sorted text[];
    missing text[];
    n bigint;
BEGIN
    PERFORM set_config('leasework.keys_passed', 'on', true);
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'leasework: events with a key need READ COMMITTED transactions, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Enqueue and finish keyed events in READ COMMITTED transactions, PostgreSQL''s default (see default_transaction_isolation).';
    END IF;
    SELECT array_agg(DISTINCT k ORDER BY k) INTO sorted FROM unnest(ks) AS k WHERE k IS NOT NULL;
    IF sorted IS NULL THEN
        RETURN;
    END IF;
    IF held = 0 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('leasework-key:' || tbl || ':' || sorted[1], 0));
        sorted := sorted[2:];
    END IF;
    FOR i IN 1..20 LOOP
        SELECT array_agg(k) INTO missing FROM unnest(sorted) AS k
        WHERE NOT pg_try_advisory_xact_lock(hashtextextended('leasework-key:' || tbl || ':' || k, 0));
        EXIT WHEN missing IS NULL;
        IF i = 20 THEN
            RAISE EXCEPTION 'leasework: key % is being committed by another transaction; this transaction finishes events of several keys and gives way rather than risk a deadlock', missing[1]
                USING ERRCODE = 'lock_not_available',
                      HINT = 'Nothing was written: write the outcomes again, one transaction per key.';
        END IF;
        sorted := missing;
        PERFORM pg_sleep(0.005);
    END LOOP;
    PERFORM set_config('leasework.key_locks', (held + 1)::text, true);

    -- A statement begun after every lock is held: it sees every commit
    -- that released one. Its cost grows with the keys given, not with the
    -- table: each key's first waiting row and "has the key a live row?"
    -- are one index probe each (the second a scalar subquery, which the
    -- planner never turns into a join reading every live row), and the
    -- rows promoted are written by id.
    WITH first AS (
        SELECT f.id
        FROM (SELECT DISTINCT k FROM unnest(ks) AS k WHERE k IS NOT NULL) AS u
        CROSS JOIN LATERAL (
            SELECT w.id FROM {{table}} AS w
            WHERE w.key = u.k AND w.status = 'WAITING'
            ORDER BY w.key_seq
            LIMIT 1
            FOR UPDATE
        ) AS f
        WHERE (SELECT true FROM {{table}} AS e
               WHERE e.key = u.k AND e.status IN ('READY', 'INPROGRESS', 'FAILED')
                 AND e.key_seq IS NOT NULL
               LIMIT 1) IS NULL
    ), promoted AS (
        UPDATE {{table}} AS o
        SET status = 'READY', next_attempt_at = greatest(o.next_attempt_at, statement_timestamp()),
            updated_at = statement_timestamp()
        WHERE o.id = ANY (ARRAY(SELECT id FROM first)) AND o.status = 'WAITING' COLLATE "C"
        RETURNING o.kind
    )
    SELECT count(*) INTO n FROM (SELECT DISTINCT kind FROM promoted) AS d, LATERAL pg_notify({{channel}}, d.kind);
END
$$;

-- At the commit of a transaction that finished a live keyed row, unless
-- the transaction passed its keys on itself.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_key"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('leasework.keys_passed', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM {{schema}}.{{name "lock_key"}}(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, OLD.key, true);
    PERFORM {{schema}}.{{name "settle_key"}}(OLD.key);
    RETURN NULL;
END
$$;
