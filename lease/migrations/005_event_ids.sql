-- leasework: workers stopped
-- Event ids in a table of their own. The unique index that makes enqueue
-- refuse a duplicate event id was on the events table, and every claim and
-- every completion (updates that change the status, so never HOT) added an
-- entry to it and checked the old one: the costliest index write of a job.
-- Here each id is written once, at enqueue, beside the row's id, and
-- removed with the row by a trigger (retention, deletion at completion,
-- an operator's DELETE).
--
-- Not safe while workers or producers of an earlier version enqueue: their
-- inserts write no event id here, so a duplicate of theirs would not be
-- refused. Stop them, migrate, start the new version.
--
-- Locks: copying the event ids reads the whole table under ACCESS SHARE,
-- which blocks neither reads nor writes (31 s for 1,000,000 rows on a busy
-- two-core machine); then dropping the old unique constraint takes ACCESS
-- EXCLUSIVE (and creating the triggers SHARE ROW EXCLUSIVE), held, reading
-- no row, until the step commits an instant later (0.2 s on the same
-- table and machine).
CREATE TABLE IF NOT EXISTS {{schema}}.{{name "event_ids"}} (
    event_id text PRIMARY KEY,
    id       bigint NOT NULL
);

INSERT INTO {{schema}}.{{name "event_ids"}} (event_id, id)
SELECT event_id, id FROM {{table}}
ON CONFLICT (event_id) DO NOTHING;

ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "event_id_key"}};

-- Whatever deletes a row (retention, deletion at completion, an operator)
-- frees its event id, as deleting a row did when the id was the row's. The
-- functions run with their owner's rights (the role that migrates), so a
-- worker's role needs no right on the event id table, only on the events
-- table; their search_path is fixed, as such functions' must be.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "forget_event_ids"}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {{schema}}.{{name "event_ids"}}
    WHERE event_id = ANY (ARRAY(SELECT event_id FROM deleted));
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "forget_event_ids"}} ON {{table}};
CREATE TRIGGER {{name "forget_event_ids"}}
    AFTER DELETE ON {{table}}
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{name "forget_event_ids"}}();

CREATE OR REPLACE FUNCTION {{schema}}.{{name "forget_all_event_ids"}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {{schema}}.{{name "event_ids"}};
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "forget_all_event_ids"}} ON {{table}};
CREATE TRIGGER {{name "forget_all_event_ids"}}
    AFTER TRUNCATE ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{name "forget_all_event_ids"}}();
