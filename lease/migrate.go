package lease

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned step of the schema.
type Migration struct {
	Version int
	Name    string
	// WhileWorkersRun reports whether the step may be applied while
	// workers and producers of the previous version run: they may wait
	// for its locks as long as its header says (the header names each lock
	// that blocks reads or writes, and for how long it is held), nothing
	// worse. When false, stop them first; the step's SQL says why in its
	// header.
	WhileWorkersRun bool
	// NoTransaction reports whether the step cannot run inside a
	// transaction (CREATE INDEX CONCURRENTLY can't). [Store.Migrate]
	// applies such a step one statement at a time, outside any
	// transaction, under session-level locks; a tool must be told so too
	// (goose: "-- +goose NO TRANSACTION"; golang-migrate: a file of its
	// own per statement). Each statement ends with a semicolon at the end
	// of a line outside a dollar quote: a function's body or a DO block
	// is one statement. Its statements are written to be run again after
	// a failure part-way (DROP INDEX CONCURRENTLY IF EXISTS before each
	// CREATE INDEX CONCURRENTLY: a failed concurrent build leaves an
	// invalid index behind).
	NoTransaction bool
	sql           string
}

// Each migration starts with directives, one per line:
//
//	-- leasework: workers running    (or stopped: see Migration.WhileWorkersRun)
//	-- leasework: no transaction     (optional: see Migration.NoTransaction)
const directive = "-- leasework: "

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration {
	entries, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	var ms []Migration
	for _, path := range entries {
		base := strings.TrimPrefix(path, "migrations/")
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("lease: badly named migration " + path)
		}
		body, err := migrationFS.ReadFile(path)
		if err != nil {
			panic(err)
		}
		m, err := parseMigration(v, name, breakMigration(v, string(body)))
		if err != nil {
			panic("lease: migration " + path + ": " + err.Error())
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

// parseMigration reads a migration's directives.
func parseMigration(version int, name, sql string) (Migration, error) {
	m := Migration{Version: version, Name: name, sql: sql}
	workers := ""
	for line := range strings.Lines(m.sql) {
		d, ok := strings.CutPrefix(strings.TrimSpace(line), directive)
		if !ok {
			break
		}
		if d == "no transaction" {
			m.NoTransaction = true
			continue
		}
		w, ok := strings.CutPrefix(d, "workers ")
		if !ok {
			return Migration{}, fmt.Errorf("unknown directive %q", d)
		}
		workers = w
	}
	switch workers {
	case "running":
		m.WhileWorkersRun = true
	case "stopped":
	default:
		return Migration{}, errors.New("it does not say whether workers may run")
	}
	if m.NoTransaction && len(statements(m.sql)) == 0 {
		return Migration{}, errors.New("it has no statement")
	}
	return m, nil
}

// statements splits the SQL of a step that runs outside a transaction
// into its statements: each ends with a semicolon at the end of a line
// outside a dollar quote ($$ or $tag$, which hold a function's body or a
// DO block), and lines that start with "--" outside a dollar quote are left
// out. Each statement must be sent alone: PostgreSQL runs the statements
// of one simple query in one implicit transaction.
func statements(sql string) []string {
	var out []string
	var cur strings.Builder
	quote := "" // the dollar quote open, if any
	for line := range strings.Lines(sql) {
		t := strings.TrimSpace(line)
		if quote == "" && (t == "" || strings.HasPrefix(t, "--")) {
			continue
		}
		cur.WriteString(line)
		for _, tag := range dollarQuote.FindAllString(line, -1) {
			switch quote {
			case "":
				quote = tag
			case tag:
				quote = ""
			}
		}
		if quote == "" && strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// dollarQuote matches the delimiters of a dollar-quoted string.
var dollarQuote = regexp.MustCompile(`\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$`)

// SQL returns the step's SQL for the table named by opts (Schema and Table;
// zero means the defaults), for teams that run migrations with their own
// tool (goose, atlas, golang-migrate). Run the steps in version order, each
// in a transaction of its own, except a step with NoTransaction: run its
// statements one at a time outside any transaction. Each creates the schema
// and the table's migrations table if needed and records itself there, as
// [Store.Migrate] does, so that Migrate and a tool can take turns: neither
// applies a step twice.
func (m Migration) SQL(opts Options) (string, error) {
	s, err := namesOnly(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, q := range migrationsTable {
		b.WriteString(s.render(q))
		b.WriteString(";\n")
	}
	b.WriteString(s.render(m.sql))
	fmt.Fprintf(&b, "\n%s\nVALUES (%d, %s) ON CONFLICT (version) DO NOTHING;\n",
		s.render(`INSERT INTO {{schema}}.{{name "migrations"}} (version, name)`), m.Version, quoteLiteral(m.Name))
	return b.String(), nil
}

// namesOnly checks the names opts gives (defaults for empty ones) and
// returns a store that renders statements for that table and runs none;
// New completes it.
func namesOnly(opts Options) (*Store, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := validateName("Options.Schema", opts.Schema, maxSchemaLen); err != nil {
		return nil, err
	}
	if err := validateName("Options.Table", opts.Table, maxTableLen); err != nil {
		return nil, err
	}
	return &Store{schema: opts.Schema, table: opts.Table, channel: channelName(opts.Schema, opts.Table)}, nil
}

// migrationsTable creates the schema and the table's migrations table.
var migrationsTable = []string{
	`CREATE SCHEMA IF NOT EXISTS {{schema}}`,
	`CREATE TABLE IF NOT EXISTS {{schema}}.{{name "migrations"}} (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT statement_timestamp())`,
}

// Migrate creates the schema, the table and everything it needs, applying
// the migrations not yet recorded in the table's migrations table, in
// version order, each in a transaction of its own that also records it (a
// step that cannot run in a transaction, [Migration.NoTransaction], one
// statement at a time): the locks a step takes on the table are held for
// that step alone, as its header says. Running it again is a no-op.
// Processes migrating tables of one schema at once are serialized by
// advisory locks keyed by the schema and the table, polled for (never
// waited for inside a statement) and held by one connection from the
// first step to the last, so every process may call it at start-up.
//
// If a step fails, Migrate returns the error with the steps before it
// applied, and the next Migrate applies that step again (from its first
// statement, for one run outside a transaction).
//
// Before applying a step it checks that no object of the schema that has a
// name the step derives from the table's ("<table>_<suffix>") belongs to
// something else, and returns a [*NameCollisionError] if one does.
//
// It returns the versions it applied.
func (s *Store) Migrate(ctx context.Context) (applied []int, err error) {
	return s.migrate(ctx, Migrations())
}

// migrateLocks are the advisory lock keys of a migration of s's table.
// CREATE ... IF NOT EXISTS is not safe against a concurrent CREATE of the
// same name. CREATE SCHEMA acts on the schema, so migrations of any table
// of the schema take the schema's lock; the table's lock after it (always
// in this order) also serializes this version with older ones, which took
// only the table's.
func (s *Store) migrateLocks() []string {
	return []string{
		"leasework:migrate-schema:" + s.schema,
		"leasework:migrate:" + s.schema + "." + s.table,
	}
}

// tryLocksSQL takes the two migration locks ($1, then $2) without
// waiting, and reports whether it took both. They are session-level locks:
// they conflict with the transaction-level ones older versions took.
const tryLocksSQL = `SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 0))
    THEN pg_try_advisory_lock(hashtextextended($2, 0)) ELSE false END`

// waitForLocks runs try until it reports the migration's locks taken,
// waiting between tries (10 ms, growing to half a second), calling giveUp
// after each failed try to let go of a lock taken alone.
//
// A migration never waits for its locks inside a statement: a session
// blocked in pg_advisory_lock holds a snapshot, and CREATE INDEX
// CONCURRENTLY, run by the holder of the locks, waits for every older
// snapshot to end. Each waiting process would then wait for the other.
func waitForLocks(ctx context.Context, try func() (bool, error), giveUp func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 10*time.Millisecond, 500*time.Millisecond, 0
	for {
		ok, err := try()
		if err != nil {
			return fmt.Errorf("lease: migrate: lock: %w", err)
		}
		if ok {
			return nil
		}
		if err := giveUp(); err != nil {
			return fmt.Errorf("lease: migrate: lock: %w", err)
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lease: migrate: waiting for another migration of the schema: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// unlockTimeout bounds the release of a migration's session locks.
const unlockTimeout = 10 * time.Second

// migrate applies the steps of ms not yet recorded, in version order, on
// one connection that holds the migration's locks from the first step to
// the last (advisory locks, which lock no table). Each step is applied,
// and recorded, in a transaction of its own, or, when it cannot run in
// one, a statement at a time: a lock that one step takes on the table (a
// moment's ACCESS EXCLUSIVE to add a column, say) is never held while
// the next one runs (an index build, say).
func (s *Store) migrate(ctx context.Context, ms []Migration) (applied []int, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	defer conn.Close()
	unlock := func() error {
		// Even when ctx has ended, but not for longer than a statement
		// should take on a live connection.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		_, err := conn.ExecContext(uctx, `SELECT pg_advisory_unlock_all()`)
		return err
	}
	defer func() {
		if unlock() != nil {
			// The session's locks end with its connection, which must
			// not go back to the pool holding them.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	keys := s.migrateLocks()
	err = waitForLocks(ctx, func() (ok bool, err error) {
		err = conn.QueryRowContext(ctx, tryLocksSQL, keys[0], keys[1]).Scan(&ok)
		return ok, err
	}, unlock)
	if err != nil {
		return nil, err
	}
	if err := s.checkNames(ctx, conn, ms); err != nil {
		return nil, err
	}
	for _, q := range migrationsTable {
		if _, err := conn.ExecContext(ctx, s.render(q)); err != nil {
			return nil, fmt.Errorf("lease: migrate: %w", err)
		}
	}
	done, err := s.appliedVersions(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		apply := s.applyInTx
		if m.NoTransaction {
			apply = s.applyNoTx
		}
		if err := apply(ctx, conn, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// applyInTx applies m and records it in one transaction on conn.
func (s *Store) applyInTx(ctx context.Context, conn *sql.Conn, m Migration) (err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("lease: migration %d (%s): %w", m.Version, m.Name, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, s.render(m.sql)); err != nil {
		return fmt.Errorf("lease: migration %d (%s): %w", m.Version, m.Name, err)
	}
	if err := s.recordMigration(ctx, tx, m); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("lease: migration %d (%s): commit: %w", m.Version, m.Name, err)
	}
	return nil
}

// applyNoTx applies m, a step that cannot run in a transaction, one
// statement at a time on conn, and then records it.
func (s *Store) applyNoTx(ctx context.Context, conn *sql.Conn, m Migration) error {
	for i, q := range statements(s.render(m.sql)) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("lease: migration %d (%s), statement %d (run outside a transaction; the next Migrate runs the step again): %w",
				m.Version, m.Name, i+1, err)
		}
	}
	return s.recordMigration(ctx, conn, m)
}

// appliedVersions reads the versions recorded in the migrations table.
func (s *Store) appliedVersions(ctx context.Context, q querier) (map[int]bool, error) {
	done := map[int]bool{}
	rows, err := q.QueryContext(ctx, s.render(`SELECT version FROM {{schema}}.{{name "migrations"}}`))
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("lease: migrate: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	return done, nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// recordMigration records m as applied.
func (s *Store) recordMigration(ctx context.Context, q execer, m Migration) error {
	if _, err := q.ExecContext(ctx, s.render(`INSERT INTO {{schema}}.{{name "migrations"}} (version, name) VALUES ($1, $2)`), m.Version, m.Name); err != nil {
		return fmt.Errorf("lease: migrate: record %d: %w", m.Version, err)
	}
	return nil
}

// DropSchema drops the store's schema and everything in it. It exists for
// tests and throwaway databases.
func (s *Store) DropSchema(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.render(`DROP SCHEMA IF EXISTS {{schema}} CASCADE`))
	if err != nil {
		return fmt.Errorf("lease: drop schema: %w", err)
	}
	return nil
}
