// Package leasetest holds test fixtures that change an events table the way
// time and rival workers would, without waiting: expire a lease, construct a
// newer generation, make a scheduled retry due. They exist for tests only;
// they bypass the ownership guard on purpose.
package leasetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

func exec(ctx context.Context, s *lease.Store, op, query string, args ...any) error {
	res, err := s.DB().ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("leasetest: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("leasetest: %s: %w", op, err)
	}
	if n != 1 {
		return fmt.Errorf("leasetest: %s: %d rows matched, want 1", op, n)
	}
	return nil
}

// ExpireLease moves the lease of an INPROGRESS row one second into the past,
// as if its owner had stalled or died that long ago.
func ExpireLease(ctx context.Context, s *lease.Store, id int64) error {
	what := fmt.Sprintf("lease of row %d", id)
	n, err := expire(ctx, s, what, "id = $1", id)
	if err == nil && n != 1 {
		err = fmt.Errorf("leasetest: expire %s: %d rows matched, want 1 INPROGRESS row", what, n)
	}
	return err
}

// ExpireAllLeases expires every INPROGRESS row's lease and returns how many
// it changed.
func ExpireAllLeases(ctx context.Context, s *lease.Store) (int64, error) {
	return expire(ctx, s, "all leases", "true")
}

// expire moves the leases of the INPROGRESS rows matching where (an SQL
// condition on bound parameters) one second into the past.
func expire(ctx context.Context, s *lease.Store, what, where string, args ...any) (int64, error) {
	res, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET lease_until = clock_timestamp() - interval '1 second'
		WHERE status = 'INPROGRESS' AND (`+where+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("leasetest: expire %s: %w", what, err)
	}
	return res.RowsAffected()
}

// NewerGeneration constructs a newer live claim of an INPROGRESS row
// directly, without the claim statement: generation + 1 and a fresh lease of
// the given length. It returns the new claim's Ref. This tests write
// protection independently of the reclaim query.
func NewerGeneration(ctx context.Context, s *lease.Store, id int64, lease time.Duration) (leasework.Ref, error) {
	var ref leasework.Ref
	err := s.DB().QueryRowContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET generation = generation + 1, status = 'INPROGRESS',
		    lease_until = clock_timestamp() + $2 * interval '1 microsecond'
		WHERE id = $1 AND status = 'INPROGRESS'
		RETURNING id, generation`, id, lease.Microseconds()).Scan(&ref.ID, &ref.Generation)
	if err != nil {
		return leasework.Ref{}, fmt.Errorf("leasetest: newer generation of row %d: %w", id, err)
	}
	return ref, nil
}

// MakeDue moves a READY row's next attempt to now, as if its retry delay had
// passed.
func MakeDue(ctx context.Context, s *lease.Store, id int64) error {
	return exec(ctx, s, fmt.Sprintf("make row %d due", id),
		`UPDATE `+s.QualifiedTable()+` SET next_attempt_at = statement_timestamp()
		 WHERE id = $1 AND status = 'READY'`, id)
}

// AgeRateStarts moves every start the rate limits of s count d into the
// past, as if d had passed since each (lease.RateLimit): the fixture that
// stands for time passing, as ExpireLease does for a lease. A claim
// running meanwhile may have its starts moved or not.
func AgeRateStarts(ctx context.Context, s *lease.Store, d time.Duration) error {
	shares := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_rate_shares")
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+shares+`
		SET starts = ARRAY(SELECT t - $1 * interval '1 microsecond' FROM unnest(starts) AS t ORDER BY t)`, d.Microseconds()); err != nil {
		return fmt.Errorf("leasetest: age the rate limits' starts by %v: %w", d, err)
	}
	return nil
}

// ForceState writes status and lease_until of a row with no guard at all.
// The schema's constraints still apply: it is how a test shows that the
// database itself refuses an INPROGRESS row without a lease.
func ForceState(ctx context.Context, s *lease.Store, id int64, status leasework.Status, leaseUntil *time.Time) error {
	return exec(ctx, s, fmt.Sprintf("force state of row %d", id),
		`UPDATE `+s.QualifiedTable()+` SET status = $2, lease_until = $3 WHERE id = $1`,
		id, string(status), leaseUntil)
}

// InsertFinished inserts n DONE rows of kind "history" in one statement, as
// a table with a long history has, and analyzes the table. It is for
// benchmarks and plan tests.
func InsertFinished(ctx context.Context, s *lease.Store, n int) error {
	return insertFinished(ctx, s, n, leasework.StatusDone)
}

// InsertFailed inserts n FAILED rows of kind "history" in one statement, as
// a table whose failures nobody repaired has (retention keeps them), and
// analyzes the table. It is for plan tests.
func InsertFailed(ctx context.Context, s *lease.Store, n int) error {
	return insertFinished(ctx, s, n, leasework.StatusFailed)
}

func insertFinished(ctx context.Context, s *lease.Store, n int, status leasework.Status) error {
	_, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+`
		(event_id, kind, status, generation, attempt, finished_at)
		SELECT 'history-' || lower($2) || '-' || g, 'history', $2, 1, 1, statement_timestamp()
		FROM generate_series(1, $1::int) AS g`, n, string(status))
	if err != nil {
		return fmt.Errorf("leasetest: insert %s rows: %w", status, err)
	}
	_, err = s.DB().ExecContext(ctx, `ANALYZE `+s.QualifiedTable())
	if err != nil {
		return fmt.Errorf("leasetest: analyze: %w", err)
	}
	return nil
}

// InsertReady inserts n due READY rows of kind "backlog" into queue in one
// statement, as a queue with a backlog nobody works off has, and vacuums
// and analyzes the table. It is for plan tests and benchmarks of other queues' claims.
func InsertReady(ctx context.Context, s *lease.Store, queue string, n int) error {
	_, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+`
		(event_id, kind, queue, next_attempt_at)
		SELECT 'backlog-' || $2 || '-' || g, 'backlog', $2, statement_timestamp() - interval '1 hour'
		FROM generate_series(1, $1::int) AS g`, n, queue)
	if err != nil {
		return fmt.Errorf("leasetest: insert READY rows: %w", err)
	}
	// VACUUM too, as autovacuum soon would after a bulk insert: its work
	// would otherwise compete with what is measured.
	if _, err := s.DB().ExecContext(ctx, `VACUUM (ANALYZE) `+s.QualifiedTable()); err != nil {
		return fmt.Errorf("leasetest: vacuum: %w", err)
	}
	return nil
}

// LoseConnection takes a connection from db, has the server terminate it
// from another connection, then runs a statement on it and returns the error
// that statement got: a lost connection, as the driver reports it.
func LoseConnection(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("leasetest: lose connection: %w", err)
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return fmt.Errorf("leasetest: lose connection: %w", err)
	}
	var ok bool
	if err := db.QueryRowContext(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("leasetest: lose connection: terminate backend %d: %v, %w", pid, ok, err)
	}
	var one int
	err = conn.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
	if err == nil {
		return errors.New("leasetest: lose connection: a statement on the terminated connection succeeded")
	}
	return err
}

// SerializationFailure provokes a serialization failure on row id and
// returns it: a REPEATABLE READ transaction reads the row, another
// transaction updates it and commits, and the first then updates it too.
func SerializationFailure(ctx context.Context, s *lease.Store, id int64) error {
	tx, err := s.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("leasetest: serialization failure: %w", err)
	}
	defer tx.Rollback()
	var seen int64
	if err := tx.QueryRowContext(ctx, `SELECT id FROM `+s.QualifiedTable()+` WHERE id = $1`, id).Scan(&seen); err != nil {
		return fmt.Errorf("leasetest: serialization failure: %w", err)
	}
	touch := `UPDATE ` + s.QualifiedTable() + ` SET updated_at = clock_timestamp() WHERE id = $1`
	if _, err := s.DB().ExecContext(ctx, touch, id); err != nil {
		return fmt.Errorf("leasetest: serialization failure: %w", err)
	}
	_, err = tx.ExecContext(ctx, touch, id)
	if err == nil {
		return errors.New("leasetest: serialization failure: the conflicting update succeeded")
	}
	return err
}

// ExpireWorkerLeases expires the leases of every INPROGRESS row claimed by
// worker, as if that worker had died that long ago, and returns how many it
// changed.
func ExpireWorkerLeases(ctx context.Context, s *lease.Store, worker string) (int64, error) {
	return expire(ctx, s, "leases of "+worker, "worker = $1", worker)
}

// DropInsertsOfKind installs a BEFORE INSERT trigger on the table that
// silently drops every row of kind, as a user's trigger might: the insert
// reports no error and returns no row for it. It shows that an enqueue
// accounts for every event it was given.
func DropInsertsOfKind(ctx context.Context, s *lease.Store, kind string) error {
	fn := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_drop_kind")
	for _, q := range []string{
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.kind = TG_ARGV[0] THEN RETURN NULL; END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER drop_kind BEFORE INSERT ON ` + s.QualifiedTable() + `
		FOR EACH ROW EXECUTE FUNCTION ` + fn + `(` + quoteLiteral(kind) + `)`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("leasetest: drop inserts of kind %q: %w", kind, err)
		}
	}
	return nil
}

func quoteLiteral(s string) string {
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

// InsertWaiting inserts, for each of keys keys of kind "history", one FAILED
// head and perKey events WAITING behind it, in one statement, as a table
// whose failures hold many keys has, and analyzes the table. The rows are
// written with the commit-time ordering trigger disabled (they are inserted
// already in order), so that a benchmark's setup takes seconds, not
// minutes. It is for benchmarks and plan tests.
func InsertWaiting(ctx context.Context, s *lease.Store, keys, perKey int) error {
	tbl := s.QualifiedTable()
	trigger := lease.QuoteIdent(s.Table() + "_order_key")
	seq := quoteLiteral(lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_key_seq"))
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("leasetest: insert waiting rows: %w", err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`ALTER TABLE ` + tbl + ` DISABLE TRIGGER ` + trigger,
		`INSERT INTO ` + tbl + ` (event_id, kind, key, key_seq, status, generation, attempt, last_error, finished_at)
		SELECT 'held-' || k || '-' || n, 'history', 'key-' || k, nextval(` + seq + `),
			CASE WHEN n = 0 THEN 'FAILED' ELSE 'WAITING' END,
			CASE WHEN n = 0 THEN 1 ELSE 0 END, CASE WHEN n = 0 THEN 1 ELSE 0 END,
			CASE WHEN n = 0 THEN 'held' END, CASE WHEN n = 0 THEN statement_timestamp() END
		FROM generate_series(1, $1::int) AS k, generate_series(0, $2::int) AS n
		ORDER BY k, n`,
		`ALTER TABLE ` + tbl + ` ENABLE TRIGGER ` + trigger,
	} {
		var args []any
		if strings.HasPrefix(strings.TrimSpace(q), "INSERT") {
			args = []any{keys, perKey}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("leasetest: insert waiting rows: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("leasetest: insert waiting rows: %w", err)
	}
	if _, err := s.DB().ExecContext(ctx, `ANALYZE `+tbl); err != nil {
		return fmt.Errorf("leasetest: analyze: %w", err)
	}
	return nil
}
