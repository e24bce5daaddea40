-- leasework: workers running
-- The events table: one row per event, owned by at most one claim at a time.
--
-- Safe while workers run? It creates the table and its indexes: nothing
-- can use them before the step commits, and it locks nothing else.
CREATE TABLE {{table}} (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text        NOT NULL,
    kind            text        NOT NULL,
    key             text,
    payload         bytea       NOT NULL DEFAULT '\x',
    status          text        NOT NULL DEFAULT 'READY'
                    CHECK (status IN ('READY', 'INPROGRESS', 'DONE', 'FAILED')),
    generation      bigint      NOT NULL DEFAULT 0 CHECK (generation >= 0),
    attempt         integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts    integer     NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
    lease_until     timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    last_error      text,
    progress        bytea,
    worker          text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    finished_at     timestamptz,
    CONSTRAINT {{name "event_id_key"}} UNIQUE (event_id),
    -- Invariant 9: a row is INPROGRESS exactly when it holds a lease.
    CONSTRAINT {{name "lease_check"}} CHECK ((status = 'INPROGRESS') = (lease_until IS NOT NULL))
);

-- Claim reads due READY rows in due order; finished rows are not in the index,
-- so the cost of a claim does not grow with history.
CREATE INDEX {{name "ready_idx"}} ON {{table}} (next_attempt_at, id) WHERE status = 'READY';

-- Claim reads expired leases in deadline order.
CREATE INDEX {{name "lease_idx"}} ON {{table}} (lease_until) WHERE status = 'INPROGRESS';

-- Retention deletes finished rows oldest first.
CREATE INDEX {{name "finished_idx"}} ON {{table}} (finished_at) WHERE status IN ('DONE', 'FAILED');
