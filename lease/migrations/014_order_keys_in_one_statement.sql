-- leasework: workers running
-- An enqueue puts its keyed events in line in one step per transaction.
--
-- The commit-time trigger of migration 4 puts each keyed row in line on
-- its own: per row, at COMMIT, a function call that takes the key's lock,
-- an UPDATE that gives the row its key_seq (and WAITING behind a live or
-- waiting row of its key), and a call of settle_key, an UPDATE of its own.
-- A transaction of 5,000 keyed events over 1,000 keys spent 320 ms at
-- COMMIT that way (64 µs a row with one producer, about 230 µs with four),
-- against 77 ms for the insert itself.
--
-- Here a statement trigger lists, after each insert, the ids of the keyed
-- rows it inserted, in the order they were inserted, in a setting of the
-- transaction (one per table, since a transaction may enqueue into
-- several: leasework.keys_listed_ and the md5 of schema.table, written
-- into the functions when the step is rendered; rolled back with a
-- savepoint as the rows are). At COMMIT the first firing of the row
-- trigger passes the list to order_keys and empties it: order_keys takes
-- the keys' locks in key order (blocking, as an enqueue's always are),
-- then, in statements begun after it holds them all, gives the rows their
-- key_seq in the order listed, makes WAITING each READY row behind a live
-- or waiting row of its key (one already in line, or one listed before
-- it), and makes READY the first waiting row of a key that has waiting
-- rows and no live one (what settle_key did after each row). The rule is
-- the per-row trigger's; only the number of statements changes. The later
-- firings find the list empty and their row in line, one primary-key
-- probe each.
--
-- A row listed alone (a transaction of one keyed event), or not listed,
-- is put in line by its own firing, as before: a row inserted while the
-- list was full (over 128 KiB of ids in one transaction: from then on
-- every keyed row of the transaction goes alone, in the order of the
-- firings, so no listed row overtakes an unlisted earlier one), a row of
-- a transaction begun before this step, a row whose trigger fires before
-- its statement ends (SET CONSTRAINTS IMMEDIATE). A transaction that
-- disables the row trigger puts nothing in line, as before.
--
-- Safe while workers run? Functions are replaced and a trigger is created:
-- SHARE ROW EXCLUSIVE on the table for an instant (writes wait, reads go
-- on), no row read.

CREATE OR REPLACE FUNCTION {{schema}}.{{name "promote_keys"}}(ks text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    -- Run under the locks of every key of ks, in a statement begun after
    -- they were taken: it sees every commit that released one. Its cost
    -- grows with the keys given, not with the table: each key's first
    -- waiting row and "has the key a live row?" are one index probe each
    -- (the second a scalar subquery, which the planner never turns into a
    -- join reading every live row), and the rows promoted are written by
    -- id. A row of the current transaction not in line yet (key_seq NULL)
    -- is not live: its own step puts it in line.
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

-- settle_keys, as migration 13 made it, with its promotion in promote_keys.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "settle_keys"}}(ks text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    -- The name the key locks hash, as the triggers give it to lock_key
    -- (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME).
    tbl text := {{keyLockTable}};
    held integer := COALESCE(NULLIF(current_setting('leasework.key_locks', true), ''), '0')::integer;
    sorted text[];
    missing text[];
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
    PERFORM {{schema}}.{{name "promote_keys"}}(ks);
END
$$;

-- order_keys puts the rows ids (in that order, each once) in line behind
-- their keys, those of them that are keyed and not in line yet. Its
-- statements join nothing: rows are read by primary-key probes and keys
-- by index probes, in scalar subqueries, so their cost grows with the
-- rows given, never with the table, whatever the plan; and the plans are
-- generic, made once a session (a custom plan of each statement at each
-- call cost more than the statements themselves for a row or two).
CREATE OR REPLACE FUNCTION {{schema}}.{{name "order_keys"}}(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    tbl text := {{keyLockTable}};
    held integer := COALESCE(NULLIF(current_setting('leasework.key_locks', true), ''), '0')::integer;
    ks text[];
    k text;
    row_ids bigint[];
    row_keys text[];
    row_statuses text[];
    seqs bigint[];
    statuses text[];
    stranded text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'leasework: events with a key need READ COMMITTED transactions, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Enqueue and finish keyed events in READ COMMITTED transactions, PostgreSQL''s default (see default_transaction_isolation).';
    END IF;
    -- The rows, in the order listed, and their keys in key order. They
    -- are this transaction's own: no one else writes them.
    SELECT array_agg(r.id ORDER BY r.n), array_agg(r.ks[1] ORDER BY r.n), array_agg(r.ks[2] ORDER BY r.n),
        array_agg(DISTINCT r.ks[1] ORDER BY r.ks[1])
    INTO row_ids, row_keys, row_statuses, ks
    FROM (SELECT p.id, p.n,
              (SELECT ARRAY[o.key, o.status] FROM {{table}} AS o
               WHERE o.id = p.id AND o.key IS NOT NULL AND o.key_seq IS NULL) AS ks
          FROM unnest(ids) WITH ORDINALITY AS p(id, n)
          OFFSET 0) AS r -- a fence: the probe runs once a row, not once a use
    WHERE r.ks IS NOT NULL;
    IF ks IS NULL THEN
        RETURN;
    END IF;
    FOREACH k IN ARRAY ks LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('leasework-key:' || tbl || ':' || k, 0));
    END LOOP;
    PERFORM set_config('leasework.key_locks', (held + 1)::text, true);

    -- Begun after every lock is held: it sees every commit that released
    -- one. A row waits when it is READY and its key has a row in line that
    -- is live or waiting, or a row listed before it that is (a row listed
    -- READY is READY or WAITING once in line). A key that has waiting rows
    -- in line and no live one, and no live row of this transaction's (its
    -- READY ones all wait then), has its first waiting row promoted. A key
    -- is probed at its first row, for waiting rows only when it has no live
    -- one.
    SELECT array_agg(d.status ORDER BY d.n),
        array_agg(d.key) FILTER (WHERE d.rk = 1 AND d.waiting AND NOT d.live AND NOT d.own_live)
    INTO statuses, stranded
    FROM (SELECT c.n, c.key, c.rk, c.own_live, c.live,
              bool_or(c.waiting) OVER (PARTITION BY c.key) AS waiting,
              CASE WHEN c.status = 'READY' AND (c.earlier OR c.live OR bool_or(c.waiting) OVER (PARTITION BY c.key))
                  THEN 'WAITING' ELSE c.status END AS status
          FROM (SELECT b.*,
                    CASE WHEN b.rk = 1 AND NOT b.live THEN
                        (SELECT true FROM {{table}} AS e
                         WHERE e.key = b.key AND e.status = 'WAITING' AND e.key_seq IS NOT NULL
                         LIMIT 1) IS NOT NULL END AS waiting
                FROM (SELECT a.n, a.key, a.status, a.rk, a.earlier, a.own_live,
                          bool_or(a.live) OVER (PARTITION BY a.key) AS live
                      FROM (SELECT r.*,
                                CASE WHEN r.rk = 1 THEN
                                    (SELECT true FROM {{table}} AS e
                                     WHERE e.key = r.key AND e.status IN ('READY', 'INPROGRESS', 'FAILED')
                                       AND e.key_seq IS NOT NULL
                                     LIMIT 1) IS NOT NULL END AS live
                            FROM (SELECT r.n, r.key, r.status,
                                      row_number() OVER (PARTITION BY r.key ORDER BY r.n) AS rk,
                                      COALESCE(bool_or(r.status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING')) OVER (
                                          PARTITION BY r.key ORDER BY r.n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS earlier,
                                      bool_or(r.status IN ('INPROGRESS', 'FAILED')) OVER (PARTITION BY r.key) AS own_live
                                  FROM unnest(row_keys, row_statuses) WITH ORDINALITY AS r(key, status, n)) AS r) AS a) AS b) AS c) AS d;

    -- key_seq in the order listed: successive values of the sequence in
    -- one session grow.
    SELECT array_agg(s ORDER BY s) INTO seqs
    FROM (SELECT nextval('{{schema}}.{{name "key_seq"}}') AS s FROM generate_series(1, cardinality(row_ids))) AS q;

    -- Each row written by id: the table is reached only through v.id.
    UPDATE {{table}} AS o
    SET key_seq = v.seq, status = v.status
    FROM unnest(row_ids, seqs, statuses) AS v(id, seq, status)
    WHERE o.id = v.id;

    IF stranded IS NOT NULL THEN
        PERFORM {{schema}}.{{name "promote_keys"}}(stranded);
    END IF;
END
$$;

-- After each insert: list its keyed rows, in the order inserted, unless
-- the transaction's list is full.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "list_keyed"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    listed text := current_setting({{keysListed}}, true);
    ids text;
BEGIN
    IF listed = 'full' THEN
        RETURN NULL;
    END IF;
    SELECT string_agg(i.id::text, ',') INTO ids FROM inserted AS i WHERE i.key IS NOT NULL;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    IF listed <> '' THEN
        ids := listed || ',' || ids;
    END IF;
    IF octet_length(ids) > 131072 THEN
        ids := 'full';
    END IF;
    PERFORM set_config({{keysListed}}, ids, true);
    RETURN NULL;
END
$$;

-- At the enqueuing transaction's commit, per keyed row: the first firing
-- puts the listed rows in line, by order_keys when there are several; a
-- row listed alone, or not listed, is put in line by its own firing, as
-- migration 4 did (for one row that costs half what order_keys does).
CREATE OR REPLACE FUNCTION {{schema}}.{{name "order_key"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    listed text := current_setting({{keysListed}}, true);
BEGIN
    IF listed <> '' AND listed <> 'full' THEN
        PERFORM set_config({{keysListed}}, '', true);
        IF listed <> NEW.id::text THEN
            PERFORM {{schema}}.{{name "order_keys"}}(string_to_array(listed, ',')::bigint[]);
        END IF;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {{table}} AS o WHERE o.id = NEW.id AND o.key IS NOT NULL AND o.key_seq IS NULL) THEN
        RETURN NULL;
    END IF;
    -- Its own row is re-read by id: the row as inserted may have changed
    -- since in the same transaction.
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

DROP TRIGGER IF EXISTS {{name "list_keyed"}} ON {{table}};
CREATE TRIGGER {{name "list_keyed"}}
    AFTER INSERT ON {{table}}
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{name "list_keyed"}}();
