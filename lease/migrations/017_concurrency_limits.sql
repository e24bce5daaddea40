-- leasework: workers running
-- Concurrency limits: at most N live attempts of a kind, or of a queue,
-- across every worker.
--
-- A limit is a row of the limits table, changed by the store's SetLimit
-- and ClearLimit (the CLI and the console call them), each change written
-- to the limit_changes table with who made it. A limit is kept in 16
-- slots (limit_slots), each a share of it: slot i of a limit of N allows
-- N / 16 attempts, one more for the first N mod 16, and counts the
-- attempts it holds (used). A claim locks the slots it takes room from,
-- FOR UPDATE SKIP LOCKED, from a slot drawn at random and no more than it
-- needs, and adds what it took: two claims never count in one slot at
-- once, no claim waits for another, and a slot never holds more than its
-- share. The events table's kind_slot and queue_slot name the slot each
-- live attempt is counted in.
--
-- An attempt that ends (DONE, FAILED, DISCARDED, retried, snoozed,
-- released, requeued, or deleted) gives its place back by a row of
-- limit_releases, written in the statement that ends it (by the store's
-- own completions, one row per slot and statement; by the trigger below
-- otherwise), and wakes idle workers of its kind at commit. The claim
-- that next locks the slot deletes its releases and counts them free.
-- Ending an attempt so locks nothing shared: a completion in a handler's
-- own transaction waits for no one, and holds up no one until it commits.
-- A claim whose snapshot misses a release committed since leaves it to
-- the next: it never counts a place free that is not.
--
-- An attempt whose lease ran out is counted no longer (invariant 16: a
-- dead or paused owner holds its place only until its lease runs out; its
-- late writes are then refused by the guard). A claim that takes such a
-- row back keeps its place for it; a claim without floors (a sweep) also
-- takes the place of one it cannot take back (another queue's, a kind it
-- does not claim), read again under the row's own lock, so that a renewal
-- that commits during the claim is seen: the row's kind_slot or
-- queue_slot is cleared and the place goes to a row this claim takes.
--
-- A completion that takes its key's next event (take_turns, migration 15)
-- takes none that a limit covers: such an event becomes READY, and a
-- claim takes it with its places.
--
-- Safe while workers run? The new tables and the functions lock nothing
-- of the events table. The step runs in one transaction: ADD COLUMN with
-- a constant default (no row rewritten) and DROP TRIGGER take ACCESS
-- EXCLUSIVE on the table, which blocks its reads and writes, and CREATE
-- TRIGGER SHARE ROW EXCLUSIVE, which blocks its writes, until the step
-- commits: a catalog change of a few milliseconds. To get them, the step
-- first waits for the transactions using the table (a handler's own open
-- transaction, say), and the table's statements queue behind it
-- meanwhile. No row is read. Workers of an earlier version keep working,
-- and keep no limit: upgrade every worker before declaring one.

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limits"}} (
    scope    text    NOT NULL CHECK (scope IN ('kind', 'queue')),
    name     text    NOT NULL CHECK (name <> '' AND octet_length(name) <= 255),
    max_live integer NOT NULL CHECK (max_live BETWEEN 0 AND 10000),
    set_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    set_by   text    NOT NULL DEFAULT '',
    -- Names the limit in its slots' keys.
    id       integer GENERATED ALWAYS AS IDENTITY UNIQUE,
    PRIMARY KEY (scope, name)
);

-- Slot i of the limit of id L has the key L * 100000 + i: a claim names
-- the slots it counts in, and a row the slot it holds a place of, by one
-- column, as the events table's rows are named by id. A slot's used never
-- falls below zero: a release counted twice would fail the claim that
-- counts it rather than admit one attempt too many.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limit_slots"}} (
    key      bigint  PRIMARY KEY,
    limit_id integer NOT NULL REFERENCES {{schema}}.{{name "limits"}} (id) ON DELETE CASCADE,
    slot     integer NOT NULL,
    cap      integer NOT NULL CHECK (cap >= 0),
    used     integer NOT NULL DEFAULT 0 CHECK (used >= 0),
    CHECK (key = limit_id::bigint * 100000 + slot AND slot BETWEEN 0 AND 15)
) WITH (fillfactor = 50);

-- Places given back and not yet counted: n of slot key's.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limit_releases"}} (
    key bigint  NOT NULL,
    id  bigint  GENERATED ALWAYS AS IDENTITY,
    n   integer NOT NULL CHECK (n > 0),
    PRIMARY KEY (key, id)
);

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limit_changes"}} (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    scope   text    NOT NULL,
    name    text    NOT NULL,
    old_max integer,
    new_max integer,
    set_by  text    NOT NULL DEFAULT ''
);

-- The keys of the slots the row's live attempt is counted in, of its
-- kind's limit and of its queue's.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS kind_slot bigint,
    ADD COLUMN IF NOT EXISTS queue_slot bigint;

-- The trigger's function: a release of each slot the attempt is counted
-- in, if the slot is still there (a cleared limit's are not).
CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_slots"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.{{name "limit_releases"}} (key, n)
    SELECT s.key, 1 FROM {{schema}}.{{name "limit_slots"}} AS s
    WHERE s.key IN (OLD.kind_slot, OLD.queue_slot);
    PERFORM pg_notify({{channel}}, OLD.kind);
    RETURN NULL;
END
$$;

-- The store's own completions give their places back themselves, in one
-- statement that commits alone, and mark it (leasework.slots_passed)
-- before they write a row: the condition, read as each row is written,
-- skips those rows.
DROP TRIGGER IF EXISTS {{name "release_slots"}} ON {{table}};
CREATE TRIGGER {{name "release_slots"}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL)
                       AND OLD.status = 'INPROGRESS' AND NEW.status <> 'INPROGRESS'
                       AND current_setting('leasework.slots_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_slots"}}();

DROP TRIGGER IF EXISTS {{name "release_slots_delete"}} ON {{table}};
CREATE TRIGGER {{name "release_slots_delete"}} AFTER DELETE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL) AND OLD.status = 'INPROGRESS'
                       AND current_setting('leasework.slots_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_slots"}}();

-- take_turns of migration 15, taking no event that a limit covers.
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
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "limits"}} AS l
                          WHERE (l.scope, l.name) IN (('kind', f.kind), ('queue', take_queue)))
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
