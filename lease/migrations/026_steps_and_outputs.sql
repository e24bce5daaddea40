-- leasework: workers running
-- Checkpointed steps and outputs, kept with the row.
--
-- steps holds the results a handler's named steps recorded
-- (framework.Step): an object from each step's name to the generation of
-- the attempt that recorded it, when, and its encoded result (base64):
-- {"charge": {"g": 3, "at": "...", "v": "eyJpZCI6NDJ9"}}. A step is
-- recorded under the guard of every outcome write (lease.Step): only the
-- claim's owner adds to it, so a paused owner that wakes up after its
-- claim was taken over cannot write a step the new attempt reads. The
-- claim hands the row's steps to each attempt (leasework.Claim.Steps); a
-- step found there is returned, not run again. output holds what the
-- handler recorded as its result (framework.RecordOutput, lease.Output),
-- under the same guard. Both go with the row: a row deleted by retention
-- or at completion takes its steps and output with it.
--
-- Safe while workers run? Adding a column with no default rewrites and
-- reads no row. It takes the table's ACCESS EXCLUSIVE lock, which blocks
-- reads and writes, for a catalog update, until the step commits (under a
-- millisecond); like any ALTER TABLE it first waits for the transactions
-- already using the table, and the statements queued behind it wait with
-- it. Rerunning it is a no-op. Workers of an earlier version never read
-- or write the columns.

ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS steps jsonb,
    ADD COLUMN IF NOT EXISTS output bytea;
