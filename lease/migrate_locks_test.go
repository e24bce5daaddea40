package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// lockNames are pg_locks' lock modes by the names of PostgreSQL's
// documentation, which the migrations' headers use.
var lockNames = map[string]string{
	"AccessShareLock":          "ACCESS SHARE",
	"RowShareLock":             "ROW SHARE",
	"RowExclusiveLock":         "ROW EXCLUSIVE",
	"ShareUpdateExclusiveLock": "SHARE UPDATE EXCLUSIVE",
	"ShareLock":                "SHARE",
	"ShareRowExclusiveLock":    "SHARE ROW EXCLUSIVE",
	"ExclusiveLock":            "EXCLUSIVE",
	"AccessExclusiveLock":      "ACCESS EXCLUSIVE",
}

// A lock on the table blocks reads (which take ACCESS SHARE) when it is
// ACCESS EXCLUSIVE, and writes (ROW EXCLUSIVE: enqueues, claims, outcome
// writes) when it is SHARE or stronger.
func blocksReads(mode string) bool { return mode == "AccessExclusiveLock" }

func blocksWrites(mode string) bool {
	switch mode {
	case "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock":
		return true
	}
	return false
}

// writesWaitForScan are the migrations whose header says that writes wait
// while they read the whole table: a plain CREATE INDEX (3, 9).
var writesWaitForScan = map[int]bool{3: true, 9: true}

// headerLocks matches lock modes named in a header, the longest name first.
var headerLocks = regexp.MustCompile(`\b(ACCESS EXCLUSIVE|SHARE ROW EXCLUSIVE|SHARE UPDATE EXCLUSIVE|ROW EXCLUSIVE|ROW SHARE|ACCESS SHARE|EXCLUSIVE|SHARE)\b`)

// concurrentIndex matches a statement that builds or drops an index
// CONCURRENTLY, which cannot run in a transaction block.
var concurrentIndex = regexp.MustCompile(`^(CREATE (UNIQUE )?|DROP )INDEX CONCURRENTLY\b`)

// TestMigrationsReadHistoryOnlyUnderLocksThatLetWorkThrough runs every
// migration's statements in the transactions Migrate runs them in (a step
// in a transaction of its own; a step that cannot run in one, statement by
// statement) on a table with history, and reads after each statement the
// locks its transaction holds on the table (pg_locks) and the rows it read
// of it (pg_stat_xact_user_tables). No statement reads the history while
// its transaction holds a lock that blocks reads; nor one that blocks
// writes, unless the step's header says writes wait for it (3 and 9, a
// plain CREATE INDEX). And each header names every lock the step takes
// that blocks reads or writes. A statement that builds or drops an index
// CONCURRENTLY cannot run in a transaction to be looked at so:
// TestIndexBuildsLetReadsAndWritesThrough catches those while they build.
func TestMigrationsReadHistoryOnlyUnderLocksThatLetWorkThrough(t *testing.T) {
	const history = 20_000
	ctx := context.Background()
	ms := lease.Migrations()
	s, _ := tableWithHistory(t, ms, 1, history)
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	table := s.Schema() + "." + s.Table()
	rowsRead := func(tx *sql.Tx) int64 {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)
			FROM pg_stat_xact_user_tables WHERE relid = to_regclass($1)`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	held := func(tx *sql.Tx) []string {
		rows, err := tx.QueryContext(ctx, `SELECT mode FROM pg_locks
			WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation = to_regclass($1) AND granted`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var modes []string
		for rows.Next() {
			var m string
			if err := rows.Scan(&m); err != nil {
				t.Fatal(err)
			}
			modes = append(modes, m)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return modes
	}

	for _, m := range ms[1:] {
		stmts := lease.Statements(lease.RenderedSQL(s, m))
		taken := map[string]bool{}
		// check runs statement i of m in tx and checks what it read
		// under the locks tx holds.
		check := func(tx *sql.Tx, i int, q string) {
			before := rowsRead(tx)
			if _, err := tx.ExecContext(ctx, q); err != nil {
				t.Fatalf("migration %d statement %d: %v\n%s", m.Version, i+1, err, q)
			}
			read := rowsRead(tx) - before
			modes := held(tx)
			for _, mode := range modes {
				taken[mode] = true
			}
			if read < history/2 {
				return
			}
			what := fmt.Sprintf("migration %d (%s) statement %d (%s) read %d rows of a table of %d",
				m.Version, m.Name, i+1, firstLine(q), read, history)
			for _, mode := range modes {
				switch {
				case blocksReads(mode):
					t.Errorf("%s while its transaction held %s, which blocks reads of the table", what, lockNames[mode])
				case blocksWrites(mode) && !writesWaitForScan[m.Version]:
					t.Errorf("%s while its transaction held %s, which blocks writes to the table", what, lockNames[mode])
				}
			}
		}
		begin := func() *sql.Tx {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx
		}
		if m.NoTransaction {
			for i, q := range stmts {
				if concurrentIndex.MatchString(q) {
					if _, err := conn.ExecContext(ctx, q); err != nil {
						t.Fatalf("migration %d statement %d: %v\n%s", m.Version, i+1, err, q)
					}
					taken["ShareUpdateExclusiveLock"] = true
					continue
				}
				tx := begin()
				check(tx, i, q)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			tx := begin()
			for i, q := range stmts {
				check(tx, i, q)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}

		named := map[string]bool{}
		for _, n := range headerLocks.FindAllString(header(lease.RenderedSQL(s, m)), -1) {
			named[n] = true
		}
		for mode := range taken {
			if (blocksReads(mode) || blocksWrites(mode)) && !named[lockNames[mode]] {
				t.Errorf("migration %d (%s) takes %s on the table, which blocks %s, and its header does not say so",
					m.Version, m.Name, lockNames[mode], map[bool]string{true: "reads and writes", false: "writes"}[blocksReads(mode)])
			}
		}
	}
}

// header returns the comment lines a migration starts with, as one line of
// prose.
func header(sql string) string {
	var words []string
	for line := range strings.Lines(sql) {
		c, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
		if !ok {
			break
		}
		words = append(words, strings.Fields(c)...)
	}
	return strings.Join(words, " ")
}

func firstLine(q string) string {
	l, _, _ := strings.Cut(q, "\n")
	if len(l) > 60 {
		l = l[:60] + "..."
	}
	return l
}

// Migrate commits each step on its own, so that a lock one step takes is
// not held while the steps after it run.
func TestMigrateCommitsEachStep(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	rows, err := s.DB().QueryContext(context.Background(), `SELECT version, xmin::text FROM `+
		lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+"_migrations")+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	byTx := map[string][]int{}
	n := 0
	for rows.Next() {
		var v int
		var xmin string
		if err := rows.Scan(&v, &xmin); err != nil {
			t.Fatal(err)
		}
		byTx[xmin] = append(byTx[xmin], v)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(lease.Migrations()) {
		t.Fatalf("%d migrations recorded; want %d", n, len(lease.Migrations()))
	}
	for _, vs := range byTx {
		if len(vs) > 1 {
			t.Errorf("migrations %v were applied in one transaction: a lock one of them takes is held while the others run", vs)
		}
	}
}

// The indexes that migrations 4 and 6 build are built while reads and
// writes go on: Migrate, upgrading a table with history from version 3,
// is caught in each concurrent build by a transaction that holds an old
// snapshot (a build waits for those to end), and meanwhile a primary-key
// read and an insert on the table run without waiting for a lock, and the
// build holds no lock on the table but SHARE UPDATE EXCLUSIVE.
func TestIndexBuildsLetReadsAndWritesThrough(t *testing.T) {
	ctx := context.Background()
	ms := lease.Migrations()
	s, id := tableWithHistory(t, ms, 3, 2000)
	table := s.Schema() + "." + s.Table()

	holder := holdSnapshot(t, s.DB())
	done := make(chan error, 1)
	go func() {
		_, err := s.Migrate(ctx)
		done <- err
	}()
	indexName := regexp.MustCompile(`INDEX CONCURRENTLY\s+(?:IF NOT EXISTS\s+)?"?(\w+)"?`)
	var built []string
	for {
		pid, query, err := blockedBy(t, s.DB(), holder.pid, done)
		if pid == 0 {
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			break
		}
		sub := indexName.FindStringSubmatch(query)
		if sub == nil {
			t.Fatalf("Migrate waits for the old snapshot in a statement that builds no index concurrently: %s", query)
		}
		built = append(built, sub[1])
		var modes string
		if err := s.DB().QueryRowContext(ctx, `SELECT COALESCE(string_agg(mode, ','), '') FROM pg_locks
			WHERE pid = $1 AND locktype = 'relation' AND relation = to_regclass($2)`, pid, table).Scan(&modes); err != nil {
			t.Fatal(err)
		}
		if modes != "ShareUpdateExclusiveLock" {
			t.Errorf("building %s, Migrate holds %q on the table; want only ShareUpdateExclusiveLock", sub[1], modes)
		}
		letThrough(t, s.DB(), "a primary-key read while "+sub[1]+" builds",
			`SELECT status FROM `+s.QualifiedTable()+` WHERE id = $1`, id)
		letThrough(t, s.DB(), "an insert while "+sub[1]+" builds",
			`INSERT INTO `+s.QualifiedTable()+` (event_id, kind) VALUES ($1, 'k')`, "during-"+sub[1])
		// The next build waits for a snapshot taken before it starts.
		next := holdSnapshot(t, s.DB())
		holder.release()
		holder = next
	}
	holder.release()
	for _, want := range []string{"waiting_idx", "live_key_idx", "queue_ready_idx", "queue_lease_idx"} {
		if !slices.Contains(built, s.Table()+"_"+want) {
			t.Errorf("Migrate was never caught building %s_%s concurrently (caught building %v)", s.Table(), want, built)
		}
	}
}

// snapshot is a transaction that holds a snapshot, and no lock on any
// table.
type snapshot struct {
	pid     int
	release func()
}

func holdSnapshot(t *testing.T, db *sql.DB) snapshot {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return snapshot{pid: pid, release: func() { tx.Rollback() }}
}

// blockedBy waits for a backend to wait for holder, returning its pid and
// query, or for done, returning 0 and its value.
func blockedBy(t *testing.T, db *sql.DB, holder int, done <-chan error) (int, string, error) {
	t.Helper()
	const bound = time.Minute
	deadline := time.Now().Add(bound)
	for {
		select {
		case err := <-done:
			return 0, "", err
		default:
		}
		var pid int
		var query string
		err := db.QueryRow(`SELECT pid, query FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, holder).Scan(&pid, &query)
		if err == nil {
			return pid, query, nil
		}
		if err != sql.ErrNoRows {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for Migrate to finish or to wait for the old snapshot", bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// letThrough runs q on a connection of its own and fails the test if the
// server shows it waiting for a lock before it returns; it then cancels it.
func letThrough(t *testing.T, db *sql.DB, what, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, q, args...)
		done <- err
	}()
	const bound = time.Minute
	deadline := time.Now().Add(bound)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return
		default:
		}
		var blockers string
		if err := db.QueryRow(`SELECT COALESCE(string_agg(a.pid || ': ' || a.query, '; '), '')
			FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids($1))`, pid).Scan(&blockers); err != nil {
			t.Fatal(err)
		}
		if blockers != "" {
			t.Errorf("%s waits for a lock held or awaited by %s", what, blockers)
			if _, err := db.Exec(`SELECT pg_cancel_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			<-done
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %v, and waiting for no lock", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
