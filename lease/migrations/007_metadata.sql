-- leasework: workers running
-- Event metadata: string pairs carried from the enqueue to the claim.
--
-- Producers put in it what travels with an event but is not its payload:
-- the enqueuer's trace context (W3C traceparent and tracestate), a
-- tenant, a correlation id. The claim hands it to the handler as
-- Claim.Metadata. NULL when an event has none.
--
-- Safe while workers run? Adding a nullable column without a default
-- rewrites nothing and holds the table's lock for an instant. Workers and
-- producers of an earlier version never read or write it.

ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS metadata jsonb;
