-- leasework: workers running
-- Rate limits: at most M attempt starts of a kind, or of a queue, in any
-- window of a period, across every worker; an event may cost more than one
-- start (its cost, in units).
--
-- A rate limit is a row of rate_limits, changed by the store's
-- SetRateLimit and ClearRateLimit, each change written to the
-- limit_changes table with its period. It is kept in 16 shares
-- (rate_shares), as a concurrency limit is kept in slots: share i of a
-- limit of M allows M / 16 starts, one more for the first M mod 16, in any
-- window of the period, and holds the times of its latest starts (starts,
-- at most its cap of them). A claim reads the shares with room now (fewer
-- starts than their cap within the last period), locks those it needs for
-- the costs of its rows FOR UPDATE SKIP LOCKED, and records a start for
-- each unit it takes, at the claim statement's time, keeping the share's
-- latest starts, as many as its cap (never dropping one by its own time:
-- a claim whose statement began earlier, locking the share later, counts
-- its own window). No window of the period ever holds more starts of a
-- share than its cap, so no window holds more than M of the limit.
-- Nothing gives a start back: an attempt that ends early, fails or is
-- released has started.
--
-- A due row a full rate limit holds back stays READY; the claim reads past
-- it (as it does for a kind at its concurrency limit), and a worker with
-- nothing to claim sleeps until the limit's oldest start leaves the window
-- (Store.NextWake), as it does for the next lease to run out.
--
-- A completion that takes its key's next event (take_turns) takes none
-- that a rate limit covers; such an event becomes READY, and a claim takes
-- it.
--
-- Safe while workers run? The new tables and the function lock nothing of
-- the events table. ADD COLUMN with a constant default (no row rewritten)
-- takes ACCESS EXCLUSIVE on the table, which blocks its reads and writes,
-- until the step commits: a catalog change of a few milliseconds, once the
-- transactions using the table have ended; its statements queue behind
-- the step meanwhile. No row is read. Workers of an earlier version keep
-- working and keep no rate limit: upgrade every worker before declaring
-- one.

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "rate_limits"}} (
    scope      text    NOT NULL CHECK (scope IN ('kind', 'queue')),
    name       text    NOT NULL CHECK (name <> '' AND octet_length(name) <= 255),
    max_starts integer NOT NULL CHECK (max_starts BETWEEN 1 AND 10000),
    -- The period, in microseconds: from a millisecond to a day.
    period_us  bigint  NOT NULL CHECK (period_us BETWEEN 1000 AND 86400000000),
    set_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by     text    NOT NULL DEFAULT '',
    -- Names the limit in its shares' keys.
    id         integer GENERATED ALWAYS AS IDENTITY UNIQUE,
    PRIMARY KEY (scope, name)
);

-- Share i of the rate limit of id L has the key L * 100000 + i.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "rate_shares"}} (
    key      bigint  PRIMARY KEY,
    limit_id integer NOT NULL REFERENCES {{schema}}.{{name "rate_limits"}} (id) ON DELETE CASCADE,
    share    integer NOT NULL,
    cap      integer NOT NULL CHECK (cap >= 0),
    -- The times of the share's latest starts, oldest first.
    starts   timestamptz[] NOT NULL DEFAULT '{}',
    CHECK (key = limit_id::bigint * 100000 + share AND share BETWEEN 0 AND 15)
) WITH (fillfactor = 50);

-- The period of a rate limit's change; NULL for a concurrency limit's.
ALTER TABLE {{schema}}.{{name "limit_changes"}} ADD COLUMN IF NOT EXISTS period_us bigint;

-- An event's cost under rate limits: the starts its attempt takes.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS cost integer NOT NULL DEFAULT 1;

-- take_turns of migration 19, taking no event that a rate limit covers
-- either.
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
        SELECT f.id, f.queue, f.kind, f.priority, f.next_attempt_at, f.key_seq, f.partition_key
        FROM (SELECT DISTINCT u.k FROM unnest(ks) AS u(k) WHERE u.k IS NOT NULL) AS u
        CROSS JOIN LATERAL (
            SELECT w.id, w.queue, w.kind, w.priority, w.next_attempt_at, w.key_seq, w.partition_key FROM {{table}} AS w
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
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "limits"}} AS l
                          WHERE (l.scope, l.name) IN (('kind', f.kind), ('queue', take_queue)))
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "rate_limits"}} AS l
                          WHERE (l.scope, l.name) IN (('kind', f.kind), ('queue', take_queue)))
          AND (f.partition_key IS NULL
               OR NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "partition_limits"}} AS l
                              WHERE l.partition IN (f.partition_key, '')))
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
