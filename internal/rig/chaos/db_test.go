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
// sink (the plain handlers' receipts), the effects of the Transactional
// handlers and the audit of every committed write to an events row.
const (
	soakSchema     = "soak"
	sinkTable      = `"soak"."sink"`
	effectsTable   = `"soak"."effects"`
	auditTable     = `"soak"."audit"`
	slotAuditTable = `"soak"."slot_audit"`
	// slotsTable is the lease store's table of its limits' slots
	// (migration 17), and partitionSlotsTable of its partitions' slots
	// (migration 19), named after the events table.
	slotsTable          = `"soak"."events_limit_slots"`
	partitionSlotsTable = `"soak"."events_partition_slots"`
	// rateSharesTable is its table of the rate limits' shares
	// (migration 21).
	rateSharesTable = `"soak"."events_rate_shares"`
)

// Application names of the test's own sessions; a worker's is its id.
const (
	adminApp    = "soak-admin"    // fixtures, checks, pg_stat_activity
	enqueuerApp = "soak-enqueuer" // the enqueuer's store, probes included
	operatorApp = "soak-operator" // cancels, pauses and resumes of a queue
)

// operators are the writers of the history that are the test's own.
var operators = []string{adminApp, enqueuerApp, operatorApp}

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

// createTables creates the sink, the effects table and the audit of the
// events table of s.
//
// The audit is the history's record of the database, and is kept dumb: an
// AFTER trigger on every insert, update and delete of an events row appends
// the row as it was before (old) and after (new), as JSON without its
// payload, progress and metadata, with the writing
// session's application_name (writer), its transaction (txid), the
// statement's start (stmt_at) and the moment of the write (at). Being in
// the writing transaction, it records exactly the writes that committed,
// and for one row in the order they committed (the second writer of a row
// waits for the first's commit before its own write). What the writes mean
// is the history checker's business (internal/rig/history).
//
// The limits' slots, the partitions' slots and the rate limits' shares
// (the lease store's own tables) have an audit of the same shape
// (slot_audit, with the table written), which the checker does not read:
// a history with violations is written with it beside it, to tell which
// claim took which slot, or recorded which starts (see checkHistory).
//
// One more trigger slows the commit of the slow renewals (limits_test.go):
// deferred to the commit of a renewal written as edgeApp, it sleeps
// edgeSlow there, the renewed row locked and its new lease not yet seen
// by anyone, as the commit of a renewal that waits for a slow synchronous
// standby would.
func createTables(ctx context.Context, db *sql.DB, s *lease.Store) error {
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
		`CREATE TABLE ` + effectsTable + ` (
			id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id   text        NOT NULL,
			row_id     bigint      NOT NULL,
			generation bigint      NOT NULL,
			worker     text        NOT NULL,
			txid       bigint      NOT NULL DEFAULT txid_current(),
			at         timestamptz NOT NULL DEFAULT clock_timestamp()
		)`,
		`CREATE TABLE ` + auditTable + ` (
			id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			op      text        NOT NULL,
			writer  text        NOT NULL,
			txid    bigint      NOT NULL,
			stmt_at timestamptz NOT NULL,
			at      timestamptz NOT NULL,
			old     jsonb,
			new     jsonb
		)`,
		`CREATE FUNCTION "soak"."audit"() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO ` + auditTable + ` (op, writer, txid, stmt_at, at, old, new)
			VALUES (TG_OP, current_setting('application_name'), txid_current(), statement_timestamp(),
				clock_timestamp(),
				CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'payload' - 'progress' - 'metadata' END,
				CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'payload' - 'progress' - 'metadata' END);
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER soak_audit AFTER INSERT OR UPDATE OR DELETE ON ` + events + `
			FOR EACH ROW EXECUTE FUNCTION "soak"."audit"()`,
		`CREATE FUNCTION "soak"."slow_commit"() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_sleep(` + fmt.Sprint(edgeSlow.Seconds()) + `);
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER soak_slow_commit AFTER UPDATE ON ` + events + `
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (current_setting('application_name') = '` + edgeApp + `'
				AND OLD.status = 'INPROGRESS' AND NEW.status = 'INPROGRESS' AND OLD.generation = NEW.generation
				AND OLD.lease_until IS DISTINCT FROM NEW.lease_until)
			EXECUTE FUNCTION "soak"."slow_commit"()`,
		`CREATE TABLE ` + slotAuditTable + ` (
			id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			tab     text        NOT NULL,
			op      text        NOT NULL,
			writer  text        NOT NULL,
			txid    bigint      NOT NULL,
			stmt_at timestamptz NOT NULL,
			at      timestamptz NOT NULL,
			old     jsonb,
			new     jsonb
		)`,
		`CREATE FUNCTION "soak"."slot_audit"() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO ` + slotAuditTable + ` (tab, op, writer, txid, stmt_at, at, old, new)
			VALUES (TG_TABLE_NAME, TG_OP, current_setting('application_name'), txid_current(), statement_timestamp(), clock_timestamp(),
				CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END, CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER soak_slot_audit AFTER INSERT OR UPDATE OR DELETE ON ` + slotsTable + `
			FOR EACH ROW EXECUTE FUNCTION "soak"."slot_audit"()`,
		`CREATE TRIGGER soak_slot_audit AFTER INSERT OR UPDATE OR DELETE ON ` + partitionSlotsTable + `
			FOR EACH ROW EXECUTE FUNCTION "soak"."slot_audit"()`,
		`CREATE TRIGGER soak_slot_audit AFTER INSERT OR UPDATE OR DELETE ON ` + rateSharesTable + `
			FOR EACH ROW EXECUTE FUNCTION "soak"."slot_audit"()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create the sink, the effects and the audit: %w", err)
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

// expireLeases moves the leases of the INPROGRESS rows claimed by worker
// one second into the past, as leasetest.ExpireWorkerLeases does, but
// skips a row locked by a transaction: a stopped worker's Transactional
// handler holds its row from its completion to its commit, and the fixture
// would wait for the stopped process. Such a row's lease is left to run
// out; nobody can take the row while it is locked anyway.
func expireLeases(ctx context.Context, s *lease.Store, worker string) error {
	_, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET lease_until = clock_timestamp() - interval '1 second'
		WHERE id = ANY (ARRAY(SELECT id FROM `+s.QualifiedTable()+`
			WHERE worker = $1 AND status = 'INPROGRESS' FOR UPDATE SKIP LOCKED))`, worker)
	if err != nil {
		return fmt.Errorf("expire the leases of %s: %w", worker, err)
	}
	return nil
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
