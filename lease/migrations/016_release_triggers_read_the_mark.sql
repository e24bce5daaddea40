-- leasework: workers running
-- The release triggers skip the rows of a completion that passes its keys
-- on itself, as each row is written instead of at COMMIT.
--
-- A store's completion passes on the keys of the rows it finishes in its
-- own statement (settle_keys, migration 13; take_turns, migration 15) and
-- marks its transaction (leasework.keys_passed), and the release triggers
-- of migration 4 return at once in a marked transaction. They still fired:
-- a deferred row trigger queues an event for each row the completion
-- finishes, and at COMMIT fetches the row again and calls the function.
-- Measured on a busy 2-core machine, the COMMIT of 500 keyed completions
-- took 1.1 to 1.5 ms with the events queued and 0.5 to 0.75 ms without
-- (fsync on): 1 to 2 µs a keyed event, of the 30 to 40 it costs the
-- server.
--
-- The triggers' condition now reads the mark, as each row is written, and
-- the store's completions mark their transaction before they write a row
-- (in the statement that locks them). A row a marked transaction finishes
-- queues nothing; a row finished before the mark, by a completion of an
-- earlier version say, queues its event, and the function still returns
-- at once at COMMIT when the transaction is marked by then. Every other
-- write (a discard, a cancel, an operator's UPDATE or DELETE, a completion
-- in a handler's own transaction) is unmarked and settled at COMMIT as
-- before.
--
-- Safe while workers run? Yes. The step runs in one transaction, so no
-- write ever commits between the drop of a trigger and its creation.
-- DROP TRIGGER takes ACCESS EXCLUSIVE on the table, which blocks its reads
-- and writes (CREATE TRIGGER's SHARE ROW EXCLUSIVE, which blocks writes,
-- is held with it), until the step commits: a catalog change of a few
-- milliseconds. To get it, the step first waits for the transactions
-- using the table (a handler's own open transaction, say), and the table's
-- statements queue behind it while it waits: run it when no long
-- transaction holds the table. No row is read. Workers of an earlier
-- version keep working: their completions mark their transactions after
-- writing, and their rows are released at COMMIT as before.

DROP TRIGGER IF EXISTS {{name "release_key"}} ON {{table}};
CREATE CONSTRAINT TRIGGER {{name "release_key"}}
    AFTER UPDATE ON {{table}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED')
                       AND NEW.status IN ('DONE', 'DISCARDED')
                       AND current_setting('leasework.keys_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();

DROP TRIGGER IF EXISTS {{name "release_key_delete"}} ON {{table}};
CREATE CONSTRAINT TRIGGER {{name "release_key_delete"}}
    AFTER DELETE ON {{table}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status IN ('READY', 'INPROGRESS', 'FAILED')
                       AND current_setting('leasework.keys_passed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {{schema}}.{{name "release_key"}}();
