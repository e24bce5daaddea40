//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/leasework/leasework/lease"
)

// The soak's schema: the events table of the lease store, and beside it the
// sink (the handlers' receipts) and the audit of accepted writes.
const (
	soakSchema = "soak"
	sinkTable  = `"soak"."sink"`
	auditTable = `"soak"."audit"`
)

// Application names of the test's own sessions; a worker's is its id.
const (
	adminApp    = "soak-admin"    // fixtures, checks, pg_stat_activity
	enqueuerApp = "soak-enqueuer" // the enqueuer's store
)

// withApp returns dsn, a URL, with application_name set to app.
func withApp(dsn, app string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// createSinkAndAudit creates the sink table and the audit of the events
// table of s.
//
// The audit is an AFTER UPDATE trigger: it sees only writes that the
// database accepted, and, being in their transaction, only those that
// committed. For every update that claims a row, renews it or writes its
// outcome it records the row's claimant before the write (owner) and after
// it (claimant), both generations, the writing session's application_name
// (writer), and whether the lease still ran when the statement started
// (lease_live): a guarded write compares lease_until with
// clock_timestamp(), which is never earlier than statement_timestamp(), so
// every write the guard let through has lease_live true.
//
// op is "claim" when the generation changed, "renew" for a write that
// leaves the row INPROGRESS at its generation, "exhausted" when a claim
// statement ended a row whose lease expired on its last attempt, and
// "outcome" for every other write that takes a row out of INPROGRESS
// (complete, retry, fail, release).
func createSinkAndAudit(ctx context.Context, db *sql.DB, s *lease.Store) error {
	events := s.QualifiedTable()
	for _, q := range []string{
		`CREATE TABLE ` + sinkTable + ` (
			id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id   text        NOT NULL,
			row_id     bigint      NOT NULL,
			generation bigint      NOT NULL,
			worker     text        NOT NULL,
			at         timestamptz NOT NULL DEFAULT clock_timestamp()
		)`,
		`CREATE INDEX ON ` + sinkTable + ` (event_id)`,
		`CREATE TABLE ` + auditTable + ` (
			id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			row_id         bigint      NOT NULL,
			op             text        NOT NULL,
			old_status     text        NOT NULL,
			new_status     text        NOT NULL,
			old_generation bigint      NOT NULL,
			new_generation bigint      NOT NULL,
			owner          text,
			claimant       text,
			writer         text        NOT NULL,
			lease_live     boolean     NOT NULL,
			at             timestamptz NOT NULL DEFAULT clock_timestamp()
		)`,
		`CREATE INDEX ON ` + auditTable + ` (row_id, id)`,
		`CREATE FUNCTION "soak"."audit"() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO ` + auditTable + ` (row_id, op, old_status, new_status, old_generation,
				new_generation, owner, claimant, writer, lease_live)
			VALUES (NEW.id,
				CASE
					WHEN NEW.generation <> OLD.generation THEN 'claim'
					WHEN NEW.status = 'INPROGRESS' THEN 'renew'
					WHEN NEW.status = 'FAILED' AND NEW.last_error LIKE 'lease expired on attempt %'
						AND OLD.lease_until <= statement_timestamp() THEN 'exhausted'
					ELSE 'outcome'
				END,
				OLD.status, NEW.status, OLD.generation, NEW.generation, OLD.worker, NEW.worker,
				current_setting('application_name'),
				COALESCE(OLD.lease_until > statement_timestamp(), false));
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER soak_audit AFTER UPDATE ON ` + events + ` FOR EACH ROW
			WHEN (OLD.status = 'INPROGRESS' OR NEW.status = 'INPROGRESS')
			EXECUTE FUNCTION "soak"."audit"()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create the sink and the audit: %w", err)
		}
	}
	return nil
}

// listenerSQL is true for a backend that is a worker's LISTEN connection:
// idle after LISTEN, or after the ping a listener sends when it has heard
// nothing for 5s (pgx sends "-- ping", lib/pq an empty query). Two other
// backends look alike. A backend that has run no query yet shows an empty
// query too, but no query_start (database/sql opens connections ahead of
// need, which can sit unused in the pool). pgx's database/sql connections
// send "-- ping" before a statement on a connection that sat in the pool:
// such a backend is idle after it only for the round trip before the
// statement, while a listener stays idle after its ping; so a ping counts
// once its backend has been idle for a second.
const listenerSQL = `(state = 'idle' AND (query LIKE 'LISTEN %'
	OR (query IN ('-- ping', '') AND query_start IS NOT NULL
		AND state_change < clock_timestamp() - interval '1 second')))`

// listeners counts the LISTEN connections of app that started after since.
func listeners(ctx context.Context, db *sql.DB, app string, since time.Time) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND backend_start > $2 AND `+listenerSQL, app, since).Scan(&n)
	return n, err
}

// backend is a server process serving a worker, as pg_stat_activity shows it.
type backend struct {
	pid      int
	started  time.Time
	state    string
	query    string
	listener bool // LISTEN connection (see listenerSQL)
}

func (b backend) String() string {
	return fmt.Sprintf("pid %d started %s %s %q listener %v", b.pid, b.started.Format("15:04:05.000000"), b.state, b.query, b.listener)
}

// terminate ends every backend of app, and returns them as they were just
// before.
func terminate(ctx context.Context, db *sql.DB, app string) ([]backend, error) {
	rows, err := db.QueryContext(ctx, `WITH b AS (
			SELECT pid, backend_start, COALESCE(state, ''), COALESCE(left(query, 60), ''), `+listenerSQL+`
			FROM pg_stat_activity WHERE application_name = $1
		)
		SELECT b.*, pg_terminate_backend(pid) FROM b`, app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backend
	for rows.Next() {
		var b backend
		var ok bool
		if err := rows.Scan(&b.pid, &b.started, &b.state, &b.query, &b.listener, &ok); err != nil {
			return nil, err
		}
		if ok {
			out = append(out, b)
		}
	}
	return out, rows.Err()
}

// dbNow reads the database clock.
func dbNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var now time.Time
	err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now, err
}

// queryInts runs a query of one bigint column.
func queryInts(ctx context.Context, db *sql.DB, query string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
