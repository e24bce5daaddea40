-- leasework: workers running
-- leasework: no transaction
-- A cancel waits for the attempt it stops; DISCARDED rows get a retention
-- rule; "was it cancelled?" becomes data.
--
-- cancelled_at is when the event was cancelled (Store.Cancel), NULL if it
-- never was. On a DISCARDED row it tells a cancelled event from a FAILED one
-- an operator discarded. On an INPROGRESS row it is a cancel waiting for the
-- attempt that runs it: the row, and its key, stay held until that attempt
-- stops (its owner's next outcome write is rejected as cancelled and ends
-- the row DISCARDED) or its lease ends (the claim statement then ends the
-- row DISCARDED instead of claiming it again). Only then does the key's next
-- event become READY (invariant 16).
--
-- <table>_stopping_idx holds those waiting rows by lease deadline: the claim
-- reads the expired ones, and nothing else. <table>_discarded_idx holds
-- DISCARDED rows by finish time: retention deletes them as it deletes DONE
-- rows (Store.DeleteFinished), which also frees their event ids.
--
-- A trigger refuses a DELETE of a keyed INPROGRESS row whose lease runs:
-- the key would pass to its next event at that commit while the attempt
-- may still run. The error says to cancel the row instead. The owner's own
-- deletion at completion (lease.CompleteAndDelete through Store.Write or
-- Store.WriteMany) names its row to the trigger and passes.
--
-- Rows cancelled before this step are DISCARDED with the last error Cancel
-- wrote, "cancelled" or "cancelled: <reason>"; they get cancelled_at =
-- finished_at. (A FAILED row whose handler's error began so, then
-- discarded, is taken for cancelled too: nothing else tells them apart.)
--
-- Safe while workers run? Yes. It runs outside a transaction, one
-- statement at a time, so no lock outlives its statement:
--   * ADD COLUMN (nullable, no default: no rewrite) takes ACCESS EXCLUSIVE
--     for a moment, and reads and writes wait for that moment. It first
--     waits for the transactions using the table, and everything queues
--     behind it meanwhile: run it when no long transaction holds the
--     table (or set lock_timeout and retry);
--   * each index is built CONCURRENTLY: reads and writes go on while it
--     reads the table (twice);
--   * the backfill updates the old cancelled rows, found through the new
--     DISCARDED index, and locks those rows only;
--   * CREATE TRIGGER takes SHARE ROW EXCLUSIVE for a moment: writes wait,
--     reads go on.
-- Measured on 1,000,000 finished rows, 10,000 of them cancelled, on a busy
-- 2-core machine, with a primary-key read and a write running every
-- millisecond under lock_timeout = 20ms: ADD COLUMN took 40-95 ms, and a
-- few reads and writes waited for it; the index builds took 4.7-5.5 s and
-- 1.9-2.7 s and the backfill 1.2-2.1 s, and no read waited on a lock
-- meanwhile (the only writes that did were of the rows being backfilled);
-- the trigger took a few milliseconds.
-- Workers and producers of an earlier version keep working, but a worker of
-- an earlier version does not see a cancel waiting for its attempt: it
-- renews, completes and may claim again such a row as if nothing were
-- asked. Upgrade the workers before relying on cancel. Rerunning the step
-- after a failure part-way is safe; each index is dropped and built again.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS cancelled_at timestamptz;

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "stopping_idx"}};
CREATE INDEX CONCURRENTLY {{name "stopping_idx"}} ON {{table}} (lease_until)
    WHERE status = 'INPROGRESS' AND cancelled_at IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "discarded_idx"}};
CREATE INDEX CONCURRENTLY {{name "discarded_idx"}} ON {{table}} (finished_at)
    WHERE status = 'DISCARDED';

UPDATE {{table}} SET cancelled_at = COALESCE(finished_at, updated_at)
WHERE status = 'DISCARDED' AND cancelled_at IS NULL
  AND (last_error = 'cancelled' OR starts_with(last_error, 'cancelled: '));

-- The owner's completion that deletes its row sets leasework.deleting to
-- the row's "id:generation" (completeDeleteSQL) in the same statement.
CREATE OR REPLACE FUNCTION {{schema}}.{{name "hold_running_key"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.lease_until > clock_timestamp()
       AND current_setting('leasework.deleting', true) IS DISTINCT FROM OLD.id || ':' || OLD.generation THEN
        RAISE EXCEPTION 'leasework: row % is INPROGRESS under a lease until %: deleting it would let the next event of key % start while its attempt may still run; cancel it instead (Store.Cancel, leasework cancel -id %), or wait for its lease to end', OLD.id, OLD.lease_until, OLD.key, OLD.id
            USING ERRCODE = 'object_in_use',
                  HINT = 'A cancelled row ends DISCARDED once its attempt stops or its lease ends; retention deletes it later, or delete it then.';
    END IF;
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS {{name "hold_running_key"}} ON {{table}};
CREATE TRIGGER {{name "hold_running_key"}}
    BEFORE DELETE ON {{table}}
    FOR EACH ROW WHEN (OLD.key IS NOT NULL AND OLD.status = 'INPROGRESS')
    EXECUTE FUNCTION {{schema}}.{{name "hold_running_key"}}();
