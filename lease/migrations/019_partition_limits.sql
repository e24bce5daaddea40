-- leasework: workers running
-- Concurrency limits per partition: at most N live attempts of the events
-- of one partition key (a tenant, an account, a downstream host), across
-- every worker, with a default N for every partition and overrides.
--
-- An event names its partition in partition_key. The partition_limits
-- table holds the default (partition '') and the overrides; a partition
-- under neither is not limited. A partition under a limit has one slot
-- row (partition_slots) that counts the attempts claimed in it (used); a
-- live attempt names its slot by id in partition_slot. A claim locks the
-- slot of each partition it takes rows of, in partition order, counts the
-- releases it sees (below), and takes rows while the count is under the
-- partition's limit. A slot is made by the first claim that needs it.
--
-- A due row that a full partition holds back is set aside: a claim that
-- finds it makes it WAITING (without a key, which is how it is told from
-- a row waiting for its key), out of the READY index the claim reads, so
-- that a backlog held back costs the claim nothing, however long. It
-- comes back, READY again, when its partition has room.
--
-- An attempt that ends gives its place back by a row of
-- partition_releases, written in the statement that ends it (by the
-- store's own completions; by the trigger release_slots otherwise), as
-- for the limits of migration 17. A release row says "look again" too: a
-- claim that leaves room in a slot after counting releases, or sets rows
-- aside, writes one with n = 0. wake_partitions, run at the start of each
-- claim, takes the slots with releases that the claim does not count in
-- itself, counts them, and makes READY as many rows set aside as there is
-- room: in a statement begun after it holds the slots' locks, so that it
-- sees every row set aside by an earlier holder of the lock. A row set
-- aside therefore always has a release of its partition after it, or a
-- full partition, and is never left behind while its partition has room.
--
-- An attempt whose lease ran out stops counting: a claim that takes it
-- back keeps its place for it; a claim without floors (a sweep) takes the
-- place from one it cannot take back, read again under its own lock, and
-- gives it back by a release.
--
-- Safe while workers run? The new tables and the functions lock nothing
-- of the events table. The step runs in one transaction: ADD COLUMN
-- without a default (no row rewritten) and DROP TRIGGER take ACCESS
-- EXCLUSIVE on the table, which blocks its reads and writes, and CREATE
-- TRIGGER SHARE ROW EXCLUSIVE, which blocks its writes, until the step
-- commits: a catalog change of a few milliseconds, once the transactions
-- using the table have ended; its statements queue behind the step
-- meanwhile. No row is read. The indexes are built by the next step,
-- concurrently. Workers of an earlier
-- version keep working, and keep no partition limit: upgrade every worker
-- before declaring one.

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "partition_limits"}} (
    -- The partition, or '' for the default of every partition.
    partition text    PRIMARY KEY CHECK (octet_length(partition) <= 1024),
    max_live  integer NOT NULL CHECK (max_live BETWEEN 0 AND 10000),
    set_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by    text    NOT NULL DEFAULT ''
);

-- A slot's id names it in the rows it counts and in its releases: a slot
-- removed and made again (a limit cleared, then declared again) is a new
-- slot, and the releases of the attempts the old one counted are not
-- counted in it. used never falls below zero: a release counted twice
-- fails the claim that counts it rather than admit one attempt too many.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "partition_slots"}} (
    partition text    PRIMARY KEY,
    id        bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
    used      integer NOT NULL DEFAULT 0 CHECK (used >= 0)
) WITH (fillfactor = 50);

-- Places given back and not yet counted (n of slot's), or a "look again"
-- (n = 0).
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "partition_releases"}} (
    slot bigint  NOT NULL,
    id   bigint  GENERATED ALWAYS AS IDENTITY,
    n    integer NOT NULL CHECK (n >= 0),
    PRIMARY KEY (slot, id)
);

ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS partition_key text,
    ADD COLUMN IF NOT EXISTS partition_slot bigint;

-- The trigger's function of migration 17, giving back the partition's
-- place too.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_slots"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.{{name "limit_releases"}} (key, n)
    SELECT s.key, 1 FROM {{schema}}.{{name "limit_slots"}} AS s
    WHERE s.key IN (OLD.kind_slot, OLD.queue_slot);
    IF OLD.partition_slot IS NOT NULL THEN
        INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n) VALUES (OLD.partition_slot, 1);
    END IF;
    PERFORM pg_notify({{channel}}, OLD.kind);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "release_slots"}} ON {{table}};
CREATE TRIGGER {{name "release_slots"}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL OR OLD.partition_slot IS NOT NULL)
                       AND OLD.status = 'INPROGRESS' AND NEW.status <> 'INPROGRESS'
                       AND current_setting('leasework.slots_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_slots"}}();

DROP TRIGGER IF EXISTS {{name "release_slots_delete"}} ON {{table}};
CREATE TRIGGER {{name "release_slots_delete"}} AFTER DELETE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL OR OLD.partition_slot IS NOT NULL)
                       AND OLD.status = 'INPROGRESS'
                       AND current_setting('leasework.slots_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_slots"}}();

-- wake_partitions counts the releases of up to 64 slots that have some,
-- but none of the partitions skip (those the calling claim counts in
-- itself), each locked SKIP LOCKED, and makes READY, for each, as many
-- rows set aside as its partition has room for, oldest first by the
-- claim's order. A partition no longer under a limit gets every row set
-- aside back, and its slot is removed. It returns the partitions it
-- counted. Its second statement begins after the locks are held: it sees
-- every row set aside by a claim that held one before. A row brought back
-- is due now at the earliest, as a key's promoted row is.
--
-- Every statement names the slots it reads or writes by id, through an
-- array (a primary-key probe each, whatever plan the server caches for
-- the function's statements), and joins the events table only through a
-- lateral read of one partition's rows set aside: its cost grows with the
-- slots it counts and the rows it brings back, never with the number of
-- slots or of rows set aside. A join there (NOT EXISTS, UPDATE FROM,
-- DELETE USING) was once planned, under the function's generic plan, as
-- a hash join over every slot, in every claim.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "wake_partitions"}}(skip text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    pending bigint[];
    live bigint[];
    ids bigint[];
    ps text[];
    n bigint;
BEGIN
    pending := ARRAY(SELECT DISTINCT r.slot FROM {{schema}}.{{name "partition_releases"}} AS r LIMIT 64);
    IF cardinality(pending) = 0 THEN
        RETURN '{}';
    END IF;
    -- The releases of slots removed since (a limit cleared) count nowhere.
    live := ARRAY(SELECT s.id FROM {{schema}}.{{name "partition_slots"}} AS s WHERE s.id = ANY (pending));
    IF cardinality(live) < cardinality(pending) THEN
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
    WITH back AS (
        DELETE FROM {{schema}}.{{name "partition_releases"}} AS r
        WHERE r.slot = ANY (ids)
        RETURNING r.slot, r.n
    ), counted AS (
        SELECT s.id, s.partition, s.used AS was,
            s.used - COALESCE((SELECT sum(b.n) FROM back AS b WHERE b.slot = s.id), 0)::integer AS used,
            COALESCE((SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = s.partition),
                     (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = '')) AS cap
        FROM {{schema}}.{{name "partition_slots"}} AS s
        WHERE s.id = ANY (ids)
    ), woken AS (
        -- Due no earlier than now, as a key's promoted row: a row set
        -- aside long ago would be due before the claim floors of the
        -- workers' claim loops (ClaimRequest.DueFrom), and wait for their
        -- sweeps, which take few rows at a time.
        UPDATE {{table}} AS o
        SET status = 'READY', next_attempt_at = greatest(o.next_attempt_at, statement_timestamp()),
            updated_at = statement_timestamp()
        WHERE o.id = ANY (ARRAY(
            SELECT w.id FROM counted AS c
            CROSS JOIN LATERAL (
                SELECT a.id FROM {{table}} AS a
                WHERE a.partition_key = c.partition AND a.status = 'WAITING' AND a.key IS NULL
                ORDER BY a.priority, a.next_attempt_at, a.id
                LIMIT CASE WHEN c.cap IS NULL THEN NULL ELSE GREATEST(c.cap - c.used, 0) END
                FOR UPDATE SKIP LOCKED) AS w))
          AND o.status = 'WAITING' COLLATE "C" AND o.key IS NULL
        RETURNING o.id, o.kind, o.partition_key
    ), look AS (
        -- A row set aside that a claim holds (it read it to take it, and
        -- may not) is passed over, not waited for: two claims each
        -- waiting for the other's would deadlock. A partition left with
        -- room and rows set aside gets a release of n = 0 for the claims
        -- that follow.
        INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
        SELECT c.id, 0 FROM counted AS c
        WHERE c.cap IS NOT NULL
          AND c.cap - c.used > (SELECT count(*) FROM woken AS k WHERE k.partition_key = c.partition)
          AND (SELECT true FROM {{table}} AS a
               WHERE a.partition_key = c.partition AND a.status = 'WAITING' AND a.key IS NULL
                 AND a.id <> ALL (ARRAY(SELECT k.id FROM woken AS k))
               LIMIT 1) IS NOT NULL
    ), kept AS (
        -- The slots are named by an array of their ids, as in the claim:
        -- a primary-key scan, whatever the plan.
        UPDATE {{schema}}.{{name "partition_slots"}} AS s
        SET used = (SELECT c.used FROM counted AS c WHERE c.id = s.id)
        WHERE s.id = ANY (ARRAY(SELECT c.id FROM counted AS c WHERE c.cap IS NOT NULL AND c.used <> c.was))
    ), gone AS (
        DELETE FROM {{schema}}.{{name "partition_slots"}} AS s
        WHERE s.id = ANY (ARRAY(SELECT c.id FROM counted AS c WHERE c.cap IS NULL))
    )
    SELECT count(pg_notify({{channel}}, d.kind)) INTO n FROM (SELECT DISTINCT kind FROM woken) AS d;
    RETURN ps;
END
$$;

-- take_turns of migration 17, taking no event that a partition limit
-- covers either: such an event becomes READY, and a claim takes it with
-- its place.
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
