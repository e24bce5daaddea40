-- leasework: workers running
-- Concurrency limits: at most N live attempts of a kind, or of a queue,
-- across every worker.
--
-- A limit is a row of the limits table, changed by the store's SetLimit
-- and ClearLimit (the CLI and the console call them), each change written
-- to the limit_changes table with who made it. Each limit has N slot rows
-- (limit_slots), and each live attempt under the limit holds one slot: the
-- slot names the row and the generation its claim gave it. The claim
-- statement takes a slot with FOR UPDATE SKIP LOCKED, so two claims never
-- take the same one and no claim waits for another, and never more than
-- N minus the slots still held.
--
-- A slot is free when it has no holder; when its holder has been claimed
-- again since (a higher generation) or has ended at that generation; or
-- when its holder's lease ran out at that generation, seen again under
-- the holder row's own lock, so that a renewal that commits during the
-- claim is not missed (invariant 16: a dead or paused owner holds a slot
-- only until its lease runs out; its late writes are then refused by the
-- guard). A holder the claim cannot see (deleted, or committed after the
-- claim's snapshot) holds its slot: the generation only grows, so a claim
-- reading an older snapshot takes a slot taken since for a busy one.
--
-- An attempt that ends (DONE, FAILED, DISCARDED, retried, snoozed,
-- released, requeued, or deleted at completion) gives its slots back in
-- the statement that ends it, by the trigger below, and wakes idle
-- workers of its kind at commit. The events table's kind_slot and
-- queue_slot columns name the slots a row was given, so that the trigger
-- finds them by primary key, and rows under no limit never call it. No
-- index of the slots reads their holder: a slot's updates change no
-- indexed column, and stay on its page (HOT) when it has room.
--
-- A completion that takes its key's next event (take_turns, migration 15)
-- takes none that a limit covers: such an event becomes READY, and a
-- claim takes it with its slots.
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
-- the slots it takes, and an attempt's end the slots it gives back, by
-- one column, as the events table's rows are named by id.
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limit_slots"}} (
    key        bigint  PRIMARY KEY,
    limit_id   integer NOT NULL REFERENCES {{schema}}.{{name "limits"}} (id) ON DELETE CASCADE,
    slot       integer NOT NULL,
    holder     bigint,
    holder_gen bigint,
    CHECK (key = limit_id::bigint * 100000 + slot AND slot BETWEEN 0 AND 99999)
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS {{schema}}.{{name "limit_changes"}} (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    scope   text    NOT NULL,
    name    text    NOT NULL,
    old_max integer,
    new_max integer,
    set_by  text    NOT NULL DEFAULT ''
);

-- The keys of the slots a claim gave the row, of its kind's limit and of
-- its queue's: its end gives them back through the slots' primary key.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS kind_slot bigint,
    ADD COLUMN IF NOT EXISTS queue_slot bigint;

CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_slots"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {{schema}}.{{name "limit_slots"}} SET holder = NULL, holder_gen = NULL
    WHERE key IN (OLD.kind_slot, OLD.queue_slot) AND holder = OLD.id AND holder_gen = OLD.generation;
    PERFORM pg_notify({{channel}}, OLD.kind);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "release_slots"}} ON {{table}};
CREATE TRIGGER {{name "release_slots"}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL)
                       AND OLD.status = 'INPROGRESS' AND NEW.status <> 'INPROGRESS')
    EXECUTE FUNCTION {{schema}}.{{name "release_slots"}}();

DROP TRIGGER IF EXISTS {{name "release_slots_delete"}} ON {{table}};
CREATE TRIGGER {{name "release_slots_delete"}} AFTER DELETE ON {{table}}
    FOR EACH ROW WHEN ((OLD.kind_slot IS NOT NULL OR OLD.queue_slot IS NOT NULL) AND OLD.status = 'INPROGRESS')
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
