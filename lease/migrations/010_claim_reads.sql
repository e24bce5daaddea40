-- leasework: workers running
-- leasework: no transaction
-- What a claim reads: the table refuses at insert what a claim cannot
-- decode, and an index finds the leases that expired on their last
-- attempt.
--
-- The metadata check of migration 7 ran its jsonpath in lax mode, which
-- unwraps arrays: it admitted {"tenant": ["acme"]} and {"a": []}, which a
-- claim cannot read as string pairs. A due time (next_attempt_at) of
-- infinity or -infinity has no time.Time either, and -infinity is due at
-- once. Two triggers refuse them at insert, with SQLSTATE 23514
-- (check_violation) naming the column: metadata must be NULL or an object
-- of strings (the jsonpath runs in strict mode), the due time finite.
--
-- Triggers, not CHECK constraints: a check, even one added NOT VALID,
-- applies to every new version of a row, so a row written before it (the
-- lax check admitted such rows) could be neither claimed nor ended FAILED
-- any more: every claim of its batch, and the write that settles it, would
-- fail. A claim that takes such an older row ends it FAILED, naming the
-- column, and returns the rest of its batch; the triggers read no row
-- written before them. The lax check is dropped: the trigger refuses all
-- it refused.
--
-- Every claim looked for the expired leases on their last attempt, to end
-- them FAILED, by reading every expired lease of its queue (all of those
-- of a paused queue, which nobody takes back). The index holds the
-- INPROGRESS rows on their last attempt only.
--
-- Safe while workers run? Each statement runs alone, outside a
-- transaction, and none but the index build reads a row.
--   * CREATE OR REPLACE FUNCTION locks nothing of the table.
--   * DROP TRIGGER IF EXISTS and ALTER TABLE ... DROP CONSTRAINT each
--     take ACCESS EXCLUSIVE on the table, which blocks its reads and
--     writes, and CREATE TRIGGER takes SHARE ROW EXCLUSIVE, which blocks
--     its writes, each for the moment of a catalog change: 0.2 to 14 ms
--     each, measured on a table of 1,000,000 finished rows on a busy
--     two-core machine. To get its lock each waits for the transactions
--     holding a lock on the table (a handler's own open transaction, say),
--     and the table's statements queue behind it while it waits.
--   * CREATE INDEX CONCURRENTLY takes SHARE UPDATE EXCLUSIVE, under which
--     reads and writes go on: it reads the table twice (2 s on the same
--     table and machine) and waits for the transactions older than it to
--     end. A failed build leaves an invalid index, which the DROP before
--     it removes when the step runs again.
-- (The statements are split at lines ending with a semicolon: the
-- function's body holds none.)

CREATE OR REPLACE FUNCTION {{schema}}.{{name "refuse_unreadable"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = TG_ARGV[0],
        MESSAGE = format('leasework: new row for relation "%s" has a value of column %s that a claim cannot read', TG_TABLE_NAME, TG_ARGV[0]),
        HINT = format('%s must be %s.', TG_ARGV[0], TG_ARGV[1]); END
$$;

DROP TRIGGER IF EXISTS {{name "metadata_check"}} ON {{table}};
CREATE TRIGGER {{name "metadata_check"}} BEFORE INSERT ON {{table}}
    FOR EACH ROW WHEN (NEW.metadata IS NOT NULL AND NOT CASE WHEN jsonb_typeof(NEW.metadata) = 'object'
        THEN NOT jsonb_path_exists(NEW.metadata, 'strict $.* ? (@.type() != "string")') ELSE false END)
    EXECUTE FUNCTION {{schema}}.{{name "refuse_unreadable"}}('metadata', 'NULL or a JSON object whose values are strings');

DROP TRIGGER IF EXISTS {{name "due_check"}} ON {{table}};
CREATE TRIGGER {{name "due_check"}} BEFORE INSERT ON {{table}}
    FOR EACH ROW WHEN (NOT isfinite(NEW.next_attempt_at))
    EXECUTE FUNCTION {{schema}}.{{name "refuse_unreadable"}}('next_attempt_at', 'a finite time');

ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "metadata_check"}};

DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "exhausted_idx"}};
CREATE INDEX CONCURRENTLY {{name "exhausted_idx"}} ON {{table}} (queue, lease_until)
    WHERE status = 'INPROGRESS' AND attempt >= max_attempts;
