-- leasework: workers running
-- Unique events whose arguments are freed when they finish, and event ids
-- forgotten by row.
--
-- An event made unique by its arguments (lease.Unique) has a derived id,
-- "unique:<kind>:<hash>", and keeps it in the event id table for as long
-- as its row is kept, like any event id. With Unique.ReleaseOn the id ends
-- in "~" and a letter per finished status that frees it (D: DONE, F:
-- FAILED, X: DISCARDED): release_unique forgets the row's event id as the
-- row enters one of them, in the same transaction, so that a later enqueue
-- of the same arguments is a new event. Its condition is read per row
-- written, before any call: a status that is not a finished one, or an id
-- that is not such, costs a comparison.
--
-- forget_event_ids forgets a deleted row's event id only while the id
-- still names that row: a row freed by release_unique shares its id with
-- the newer row that took it, whose id must stay when retention deletes
-- the old one.
--
-- Safe while workers run? Yes. CREATE TRIGGER takes SHARE ROW EXCLUSIVE
-- on the events table, which blocks writes (not reads) for a catalog
-- change of a few milliseconds, after waiting for the transactions that
-- write the table; the functions are replaced in place. No row is read.
-- Workers of an earlier version write no "~" ids.

CREATE OR REPLACE FUNCTION {{schema}}.{{name "release_unique"}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {{schema}}.{{name "event_ids"}} WHERE event_id = NEW.event_id AND id = NEW.id;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{name "release_unique"}} ON {{table}};
CREATE TRIGGER {{name "release_unique"}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN (NEW.status IN ('DONE', 'FAILED', 'DISCARDED') AND OLD.status IS DISTINCT FROM NEW.status
                       AND NEW.event_id LIKE 'unique:%~%'
                       AND strpos(COALESCE(substring(NEW.event_id FROM '~([DFX]+)$'), ''),
                                  CASE NEW.status WHEN 'DONE' THEN 'D' WHEN 'FAILED' THEN 'F' ELSE 'X' END) > 0)
    EXECUTE FUNCTION {{schema}}.{{name "release_unique"}}();

CREATE OR REPLACE FUNCTION {{schema}}.{{name "forget_event_ids"}}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM {{schema}}.{{name "event_ids"}} AS x
    WHERE x.event_id = ANY (ARRAY(SELECT event_id FROM deleted))
      AND x.id = ANY (ARRAY(SELECT id FROM deleted));
    RETURN NULL;
END
$$;
