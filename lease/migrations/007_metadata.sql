-- leasework: workers running
-- Event metadata: string pairs carried from the enqueue to the claim.
--
-- Producers put in it what travels with an event but is not its payload:
-- the enqueuer's trace context (W3C traceparent and tracestate), a
-- tenant, a correlation id. The claim hands it to the handler as
-- Claim.Metadata. NULL when an event has none.
--
-- The check keeps out what a claim could not read (an array, a number, an
-- object with other than string values) from producers that write the
-- table with their own SQL: one such row would fail every claim batch it
-- is in.
--
-- Safe while workers run? Adding a nullable column without a default
-- rewrites nothing; with the check, it takes ACCESS EXCLUSIVE on the table
-- for an instant once granted (50 ms on a table of 1,000,000 rows, a busy
-- two-core machine; like any such lock it first waits for the
-- transactions that hold a lock on the table, and statements on the table
-- queue behind it meanwhile). The check is added NOT VALID, so it reads no
-- row (the new column holds only NULLs) and holds for every row written
-- from now on. Workers and producers of an earlier version never read or
-- write the column.

ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS metadata jsonb;
ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{name "metadata_check"}};
ALTER TABLE {{table}} ADD CONSTRAINT {{name "metadata_check"}} CHECK (metadata IS NULL OR (
    jsonb_typeof(metadata) = 'object' AND NOT jsonb_path_exists(metadata, '$.* ? (@.type() != "string")')))
    NOT VALID;
