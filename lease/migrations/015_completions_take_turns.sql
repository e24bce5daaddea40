-- leasework: workers running
-- A completion may hand each key it passes on to its own worker.
--
-- Since migration 13 a batch of the store's completions passes its keys on
-- at the end of its statement (settle_keys): each key's next event becomes
-- READY, and a claim then takes it. That is two row writes and a claim
-- statement more than a keyless event costs, for an event whose turn the
-- completing worker knows has come. take_turns does what settle_keys does
-- (the same locks, taken the same way, and the same rule: a key's first
-- waiting row, when the key has no live row), and claims for the caller,
-- in the same UPDATE that would have made them READY, up to take_limit of
-- those next events that a claim of take_queue by the caller could take
-- now: of take_queue, of one of take_kinds (any kind when there are none),
-- due, the queue not paused. They become INPROGRESS under a lease of
-- lease_us microseconds owned by take_worker, with the next generation and
-- one more attempt, exactly as the claim statement writes them, and are
-- returned; the others become READY and idle workers are woken, as
-- settle_keys does. It is called by the store's completions
-- (Store.WriteManyTakingTurns), at the end of their statement, with the
-- keys of the rows they finished.
--
-- lock_keys is settle_keys' locking, on its own: the keys' locks in key
-- order, the first waited for, each later one tried for a short while,
-- then given way with SQLSTATE 55P03.
--
-- Safe while workers run? Yes: functions are created, nothing else; no
-- table lock, no row read. Workers of an earlier version keep using
-- settle_keys.

CREATE OR REPLACE FUNCTION {{schema}}.{{name "lock_keys"}}(ks text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    -- The name the key locks hash, as the triggers give it to lock_key
    -- (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME).
    tbl text := {{keyLockTable}};
    held integer := COALESCE(NULLIF(current_setting('leasework.key_locks', true), ''), '0')::integer;
    sorted text[];
    missing text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'leasework: events with a key need READ COMMITTED transactions, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Enqueue and finish keyed events in READ COMMITTED transactions, PostgreSQL''s default (see default_transaction_isolation).';
    END IF;
    SELECT array_agg(DISTINCT u.k ORDER BY u.k) INTO sorted FROM unnest(ks) AS u(k) WHERE u.k IS NOT NULL;
    IF sorted IS NULL THEN
        RETURN;
    END IF;
    IF held = 0 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('leasework-key:' || tbl || ':' || sorted[1], 0));
        sorted := sorted[2:];
    END IF;
    FOR i IN 1..20 LOOP
        SELECT array_agg(u.k) INTO missing FROM unnest(sorted) AS u(k)
        WHERE NOT pg_try_advisory_xact_lock(hashtextextended('leasework-key:' || tbl || ':' || u.k, 0));
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
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.{{name "take_turns"}}(ks text[], take_queue text, take_limit integer,
    take_kinds text[], lease_us bigint, take_worker text) RETURNS SETOF {{table}}
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('leasework.keys_passed', 'on', true);
    PERFORM {{schema}}.{{name "lock_keys"}}(ks);
    -- Begun after every lock is held: it sees every commit that released
    -- one. Each key's first waiting row and "has the key a live row?" are
    -- one index probe each, as in promote_keys; the rows written are named
    -- by id.
    RETURN QUERY
    WITH first AS (
        SELECT f.id, f.queue, f.kind, f.priority, f.next_attempt_at, f.key_seq
        FROM (SELECT DISTINCT u.k FROM unnest(ks) AS u(k) WHERE u.k IS NOT NULL) AS u
        CROSS JOIN LATERAL (
            SELECT w.id, w.queue, w.kind, w.priority, w.next_attempt_at, w.key_seq FROM {{table}} AS w
            WHERE w.key = u.k AND w.status = 'WAITING'
            ORDER BY w.key_seq
            LIMIT 1
            FOR UPDATE
        ) AS f
        WHERE (SELECT true FROM {{table}} AS e
               WHERE e.key = u.k AND e.status IN ('READY', 'INPROGRESS', 'FAILED')
                 AND e.key_seq IS NOT NULL
               LIMIT 1) IS NULL
    ), taken AS (
        SELECT f.id FROM first AS f
        WHERE f.queue = take_queue
          AND (cardinality(take_kinds) = 0 OR f.kind = ANY (take_kinds))
          AND f.next_attempt_at <= statement_timestamp()
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "queues"}} AS q WHERE q.queue = take_queue)
        ORDER BY f.priority, f.next_attempt_at, f.key_seq
        LIMIT greatest(take_limit, 0)
    ), claimed AS (
        UPDATE {{table}} AS o
        SET status = 'INPROGRESS',
            generation = GREATEST(o.generation + 1, (SELECT
                (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32)),
            attempt = o.attempt + 1,
            lease_until = statement_timestamp() + lease_us * interval '1 microsecond',
            worker = NULLIF(take_worker, ''),
            updated_at = statement_timestamp()
        WHERE o.id = ANY (ARRAY(SELECT t.id FROM taken AS t)) AND o.status = 'WAITING' COLLATE "C"
        RETURNING o.*
    ), promoted AS (
        UPDATE {{table}} AS o
        SET status = 'READY', next_attempt_at = greatest(o.next_attempt_at, statement_timestamp()),
            updated_at = statement_timestamp()
        WHERE o.id = ANY (ARRAY(SELECT f.id FROM first AS f EXCEPT SELECT t.id FROM taken AS t))
          AND o.status = 'WAITING' COLLATE "C"
        -- One notification per kind: PostgreSQL delivers one of those a
        -- transaction sends alike.
        RETURNING pg_notify({{channel}}, o.kind)
    )
    SELECT c.* FROM claimed AS c;
END
$$;
