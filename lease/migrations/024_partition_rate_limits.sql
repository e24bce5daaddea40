-- leasework: workers running
-- Rate limits per partition: at most M attempt starts of the events of one
-- partition key (a tenant, an account, a downstream host) in any window of
-- a period, across every worker, with a default for every partition and
-- overrides, as the concurrency limits per partition of migration 19.
--
-- The partition_rates table holds the default (partition '') and the
-- overrides; a partition under neither has no rate limit. A partition's
-- starts are kept in its slot (partition_slots, the row a claim already
-- locks for the partition's concurrency limit): the times of its latest
-- starts, at most M of them, as a share of a kind's rate limit keeps its
-- own (migration 21). A partition under a rate limit has a slot whether or
-- not it is under a concurrency limit; an attempt is counted in its slot's
-- used (partition_slot) only under a concurrency limit.
--
-- A due row that a partition's rate limit holds back is set aside, as a
-- full partition's is (WAITING without a key): out of the READY index, so
-- that a backlog held back costs the claim nothing. Its partition's room
-- comes back with time, not with a release: the claim that sets it aside
-- writes a timer (partition_timers) at the moment the oldest start in its
-- window leaves it. wake_partitions takes the slots of due timers as it
-- takes those with releases, and makes READY as many rows set aside as the
-- partition has room for under both its limits; while rows stay set aside
-- and the rate is what holds them, it writes the next timer. A worker with
-- nothing to claim sleeps until the earliest timer (Store.NextWake). A row
-- set aside therefore always has a release of its partition after it, a
-- timer, or a full partition.
--
-- A completion that takes its key's next event (take_turns) takes none
-- that a partition rate limit covers: such an event becomes READY, and a
-- claim takes it.
--
-- Safe while workers run? The new tables and the functions lock nothing
-- of the events table but take_turns' replacement. ADD COLUMN with a
-- constant default on the slots' table (no row rewritten) takes ACCESS
-- EXCLUSIVE on that small table until the step commits: the claims that
-- lock a slot wait that long. No row of the events table is read or
-- locked. Workers of an earlier version keep working and keep no rate
-- limit per partition: upgrade every worker before declaring one.

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "partition_rates"}} (
    -- The partition, or '' for the default of every partition.
    partition  text    PRIMARY KEY CHECK (octet_length(partition) <= 1024),
    max_starts integer NOT NULL CHECK (max_starts BETWEEN 1 AND 10000),
    -- The period, in microseconds: from a millisecond to a day.
    period_us  bigint  NOT NULL CHECK (period_us BETWEEN 1000 AND 86400000000),
    set_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by     text    NOT NULL DEFAULT ''
);

-- The times of the partition's latest starts, at most its rate limit's
-- Max of them; empty under no rate limit.
ALTER TABLE {{schema}}.{{name "partition_slots"}} ADD COLUMN IF NOT EXISTS starts timestamptz[] NOT NULL DEFAULT '{}';

-- When a slot's rate limit next has room for rows it set aside. A slot
-- removed takes its timer with it.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "partition_timers"}} (
    slot bigint      PRIMARY KEY REFERENCES {{schema}}.{{name "partition_slots"}} (id) ON DELETE CASCADE,
    at   timestamptz NOT NULL,
    -- The earliest first: for wake_partitions and Store.NextWake.
    UNIQUE (at, slot)
);

-- wake_partitions of migration 19, counting the slots of due timers too,
-- and a partition's rate limit in its room. See migration 19 for how it
-- reads: every statement names the slots it reads or writes by id.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "wake_partitions"}}(skip text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    pending bigint[];
    live bigint[];
    ids bigint[];
    ps text[];
    n bigint;
BEGIN
    pending := ARRAY(SELECT DISTINCT r.slot FROM {{schema}}.{{name "partition_releases"}} AS r LIMIT 64)
        || ARRAY(SELECT t.slot FROM {{schema}}.{{name "partition_timers"}} AS t
                 WHERE t.at <= statement_timestamp() ORDER BY t.at LIMIT 64);
    IF cardinality(pending) = 0 THEN
        RETURN '{}';
    END IF;
    -- The releases of slots removed since (a limit cleared) count nowhere.
    live := ARRAY(SELECT s.id FROM {{schema}}.{{name "partition_slots"}} AS s WHERE s.id = ANY (pending));
    IF cardinality(live) < cardinality(ARRAY(SELECT DISTINCT p FROM unnest(pending) AS p)) THEN
        DELETE FROM {{schema}}.{{name "partition_releases"}} AS r
        WHERE r.slot = ANY (ARRAY(SELECT p.slot FROM unnest(pending) AS p(slot) WHERE p.slot <> ALL (live)));
    END IF;
    SELECT array_agg(s.id), array_agg(s.partition) INTO ids, ps
    FROM (SELECT s.id, s.partition FROM {{schema}}.{{name "partition_slots"}} AS s
          WHERE s.id = ANY (live)
            AND s.partition <> ALL (COALESCE(skip, '{}'))
          ORDER BY s.partition
          FOR UPDATE SKIP LOCKED) AS s;
    IF ids IS NULL THEN
        RETURN '{}';
    END IF;
    -- The due timers of the slots held, rung: a statement of its own, so
    -- that the next may write a slot's next timer.
    DELETE FROM {{schema}}.{{name "partition_timers"}} AS t
    WHERE t.slot = ANY (ids) AND t.at <= statement_timestamp();
    WITH back AS (
        DELETE FROM {{schema}}.{{name "partition_releases"}} AS r
        WHERE r.slot = ANY (ids)
        RETURNING r.slot, r.n
    ), counted AS (
        SELECT s.id, s.partition, s.used AS was,
            s.used - COALESCE((SELECT sum(b.n) FROM back AS b WHERE b.slot = s.id), 0)::integer AS used,
            COALESCE((SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = s.partition),
                     (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = '')) AS cap,
            r.max_starts AS rmax, r.period,
            -- The starts of the window that ends now, and when the oldest
            -- of them leaves it.
            (SELECT count(*) FROM unnest(s.starts) AS t WHERE t > statement_timestamp() - r.period) AS recent,
            (SELECT min(t) FROM unnest(s.starts) AS t WHERE t > statement_timestamp() - r.period) + r.period AS next_at
        FROM {{schema}}.{{name "partition_slots"}} AS s
        LEFT JOIN LATERAL (
            SELECT l.max_starts, l.period_us * interval '1 microsecond' AS period
            FROM {{schema}}.{{name "partition_rates"}} AS l
            WHERE l.partition IN (s.partition, '')
            ORDER BY l.partition = ''
            LIMIT 1) AS r ON true
        WHERE s.id = ANY (ids)
    ), roomed AS (
        -- Room for rows under both limits: NULL under neither.
        SELECT c.*,
            CASE WHEN c.cap IS NULL AND c.rmax IS NULL THEN NULL
                 ELSE GREATEST(LEAST(COALESCE(c.cap - c.used, 2147483647), COALESCE(c.rmax - c.recent, 2147483647)), 0) END AS room
        FROM counted AS c
    ), woken AS (
        -- Due no earlier than now, as a key's promoted row: a row set
        -- aside long ago would be due before the claim floors of the
        -- workers' claim loops (ClaimRequest.DueFrom), and wait for their
        -- sweeps, which take few rows at a time.
        UPDATE {{table}} AS o
        SET status = 'READY', next_attempt_at = greatest(o.next_attempt_at, statement_timestamp()),
            updated_at = statement_timestamp()
        WHERE o.id = ANY (ARRAY(
            SELECT w.id FROM roomed AS c
            CROSS JOIN LATERAL (
                SELECT a.id FROM {{table}} AS a
                WHERE a.partition_key = c.partition AND a.status = 'WAITING' AND a.key IS NULL
                  AND a.cost <= COALESCE(c.rmax, a.cost)
                ORDER BY a.priority, a.next_attempt_at, a.id
                LIMIT c.room
                FOR UPDATE SKIP LOCKED) AS w))
          AND o.status = 'WAITING' COLLATE "C" AND o.key IS NULL
        RETURNING o.id, o.kind, o.partition_key
    ), left_behind AS (
        -- The partitions with rows set aside still (a row a claim holds
        -- is passed over, not waited for: two claims each waiting for the
        -- other's would deadlock), with what room they had. A row that
        -- costs more than its partition's rate limit allows in a window
        -- is neither brought back nor waited for: it never starts under
        -- the limit, and a change of the limit looks again.
        SELECT c.id, c.room, c.rmax, c.recent, c.next_at,
            (SELECT count(*) FROM woken AS k WHERE k.partition_key = c.partition) AS took
        FROM roomed AS c
        WHERE c.room IS NOT NULL
          AND (SELECT true FROM {{table}} AS a
               WHERE a.partition_key = c.partition AND a.status = 'WAITING' AND a.key IS NULL
                 AND a.cost <= COALESCE(c.rmax, a.cost)
                 AND a.id <> ALL (ARRAY(SELECT k.id FROM woken AS k))
               LIMIT 1) IS NOT NULL
    ), look AS (
        -- A partition left with room gets a release of n = 0 for the
        -- claims that follow.
        INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
        SELECT b.id, 0 FROM left_behind AS b
        WHERE b.room > b.took
    ), timed AS (
        -- A partition whose rate limit has no room for more gets a timer
        -- for when it has.
        INSERT INTO {{schema}}.{{name "partition_timers"}} AS t (slot, at)
        SELECT b.id, COALESCE(b.next_at, statement_timestamp()) FROM left_behind AS b
        WHERE b.rmax IS NOT NULL AND b.rmax - b.recent <= b.took
        ON CONFLICT (slot) DO UPDATE SET at = LEAST(t.at, EXCLUDED.at)
    ), kept AS (
        -- The slots are named by an array of their ids, as in the claim:
        -- a primary-key scan, whatever the plan.
        UPDATE {{schema}}.{{name "partition_slots"}} AS s
        SET used = (SELECT c.used FROM counted AS c WHERE c.id = s.id)
        WHERE s.id = ANY (ARRAY(SELECT c.id FROM counted AS c
                                WHERE (c.cap IS NOT NULL OR c.rmax IS NOT NULL) AND c.used <> c.was))
    ), gone AS (
        DELETE FROM {{schema}}.{{name "partition_slots"}} AS s
        WHERE s.id = ANY (ARRAY(SELECT c.id FROM counted AS c WHERE c.cap IS NULL AND c.rmax IS NULL))
    )
    SELECT count(pg_notify({{channel}}, d.kind)) INTO n FROM (SELECT DISTINCT kind FROM woken) AS d;
    RETURN ps;
END
$$;

-- take_turns of migration 21, taking no event that a partition rate limit
-- covers either.
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
               OR (NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "partition_limits"}} AS l
                               WHERE l.partition IN (f.partition_key, ''))
                   AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "partition_rates"}} AS l
                                   WHERE l.partition IN (f.partition_key, ''))))
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
