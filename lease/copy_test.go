package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// pathStores returns two stores on one fresh table through driver drv: the
// first enqueues with the INSERT, the second copies every batch.
func pathStores(t *testing.T, drv leasework.Driver) (insert, copying *lease.Store) {
	t.Helper()
	insert = pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: -1})
	copying, err := lease.New(insert.DB(), drv, lease.Options{Schema: insert.Schema(), EnqueueCopyMin: 1})
	if err != nil {
		t.Fatal(err)
	}
	return insert, copying
}

// enqueueCommitted enqueues events with opts in a transaction of s's pool
// and commits it.
func enqueueCommitted(t *testing.T, s *lease.Store, opts lease.EnqueueOptions, events []lease.Event) []lease.Enqueued {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.EnqueueWith(ctx, tx, opts, events...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopyStoresWhatTheInsertStores: a batch copied (lib/pq's COPY) and the
// same batch inserted (the INSERT) give the same rows: every column, the
// event ids generated for events without one, the same order of row ids
// (key order in the database's collation, then the order given), the same
// statuses once in line, and the same due time, to the microsecond as the
// server rounds the INSERT's text, or, without RunAt, the database's time
// of the statement that wrote the row (its created_at). With and without
// SkipDuplicates. A batch that mixes events with RunAt and without goes in
// with the INSERT on both stores.
func TestCopyStoresWhatTheInsertStores(t *testing.T) {
	base := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	nanos := []int{0, 500, 1500, 2500, 2501, 999_999_500, 123_456_789, 999_999_999, 1}
	for _, c := range []struct {
		name  string
		runAt func(i int) time.Time
		skip  bool
	}{
		{"due now", nil, false},
		{"due now, skipping duplicates", nil, true},
		{"due later", func(i int) time.Time { return base.Add(time.Duration(nanos[i])) }, false},
		{"due later, skipping duplicates", func(i int) time.Time { return base.Add(time.Duration(nanos[i])).In(time.FixedZone("x", 3600)) }, true},
		{"mixed", func(i int) time.Time {
			if i%2 == 0 {
				return time.Time{}
			}
			return base.Add(time.Duration(nanos[i]))
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			insert, copying := pathStores(t, pgtest.Drivers[1].New())
			inserts := pgtest.WatchInserts(t, insert)
			opts := lease.EnqueueOptions{SkipDuplicates: c.skip}
			in := enqueueCommitted(t, insert, opts, pgtest.CopyBatch("ins:", c.runAt))
			copies, statements := inserts()
			cp := enqueueCommitted(t, copying, opts, pgtest.CopyBatch("cp:", c.runAt))
			copies2, statements2 := inserts()
			wantCopies := 1
			if c.name == "mixed" {
				wantCopies = 0
			}
			if copies != 0 || statements != 1 || copies2-copies != wantCopies || statements2-statements != 1-wantCopies {
				t.Errorf("rows went in by COPY %d and %d times, by INSERT %d and %d times; want the INSERT, then %d COPY",
					copies, copies2-copies, statements, statements2-statements, wantCopies)
			}
			pgtest.CompareRows(t, insert, in, cp)
		})
	}
}

// TestCopyDuplicatesAreRefusedAsByTheInsert: through lib/pq's COPY, an
// event id in the table fails the call with ErrDuplicateEvent and aborts
// the transaction (25P02 after it), leaving the row as it was; an id
// given twice fails before anything is sent, the transaction usable;
// skipping duplicates marks both kinds and copies the rest, the first of
// a repeated id inserted.
func TestCopyDuplicatesAreRefusedAsByTheInsert(t *testing.T) {
	drv := pgtest.Drivers[1].New()
	_, s := pathStores(t, drv)
	ctx := context.Background()
	old := enqueueCommitted(t, s, lease.EnqueueOptions{}, []lease.Event{{Kind: "k", EventID: "old", Payload: []byte("kept")}})

	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = s.Enqueue(ctx, tx, lease.Event{Kind: "k", EventID: "a"}, lease.Event{Kind: "k", EventID: "b"}, lease.Event{Kind: "k", EventID: "a"})
	if !errors.Is(err, leasework.ErrDuplicateEvent) || !strings.Contains(err.Error(), "events 0 and 2 share event id") {
		t.Fatalf("an id twice in the call: %v; want ErrDuplicateEvent naming events 0 and 2", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the transaction after an in-call duplicate: %v; want it usable", err)
	}
	_, err = s.Enqueue(ctx, tx, lease.Event{Kind: "k", EventID: "c"}, lease.Event{Kind: "k", EventID: "old", Payload: []byte("new")})
	if !errors.Is(err, leasework.ErrDuplicateEvent) || drv.SQLState(err) != leasework.SQLStateUniqueViolation || !strings.HasPrefix(err.Error(), "lease: enqueue: ") {
		t.Fatalf("an id in the table: %v; want lease: enqueue: ErrDuplicateEvent wrapping the unique violation", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); drv.SQLState(err) != "25P02" {
		t.Errorf("a statement after the duplicate: %v; want 25P02, the transaction aborted", err)
	}
	tx.Rollback()
	if r, err := s.Get(ctx, old[0].ID); err != nil || string(r.Payload) != "kept" {
		t.Errorf("the existing row: %+v, %v; want it unchanged", r, err)
	}
	if _, err := s.GetByEventID(ctx, "c"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("event c of the failed call: %v; want no row", err)
	}

	out := enqueueCommitted(t, s, lease.EnqueueOptions{SkipDuplicates: true}, []lease.Event{
		{Kind: "k", EventID: "new", Payload: []byte("1")}, {Kind: "k", EventID: "old"}, {Kind: "k", EventID: "new", Payload: []byte("2")},
	})
	if out[0].ID == 0 || out[0].Duplicate || out[1].ID != 0 || !out[1].Duplicate || out[2].ID != 0 || !out[2].Duplicate {
		t.Fatalf("skipping duplicates: %+v; want new copied, old and the repeat of new Duplicate", out)
	}
	if r, err := s.GetByEventID(ctx, "new"); err != nil || r.ID != out[0].ID || string(r.Payload) != "1" {
		t.Errorf("row of new: %+v, %v; want the first of the call", r, err)
	}
}

// TestCopyBesideInsertsInOneTransaction: in one transaction, enqueues
// below EnqueueCopyMin (the INSERT) and above it (COPY) of the same keys
// put their rows in line in the order of the calls, and in the order
// given within each; the event ids of both are one set: a COPY of an id
// that an INSERT of the same transaction wrote fails with
// ErrDuplicateEvent (rolled back to a savepoint, the rest commits); the
// commit wakes a listener once per kind.
func TestCopyBesideInsertsInOneTransaction(t *testing.T) {
	drv := pgtest.Drivers[1].New()
	s := pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: 3})
	inserts := pgtest.WatchInserts(t, s)
	ctx := context.Background()
	l, err := drv.(leasework.Notifier).Listen(ctx, s.DB(), s.Channel())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	calls := [][]lease.Event{
		append(keyed("x", "x1"), keyed("y", "y1")...),                                    // INSERT
		append(keyed("y", "y2", "y3"), append(keyed("x", "x2"), keyed("z", "z1")...)...), // COPY
		keyed("x", "x3"), // INSERT
	}
	for _, c := range calls {
		if _, err := s.Enqueue(ctx, tx, c...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT dup"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Enqueue(ctx, tx, append(keyed("y", "y4", "x1"), keyed("w", "w1")...)...)
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		t.Fatalf("a COPY of an id this transaction inserted: %v; want ErrDuplicateEvent", err)
	}
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT dup"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "other", EventID: "keyless-1"}, lease.Event{Kind: "other", EventID: "keyless-2"}, lease.Event{Kind: "k", EventID: "keyless-3"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, s, map[string][]string{"x": {"x1", "x2", "x3"}, "y": {"y1", "y2", "y3"}, "z": {"z1"}})
	if _, err := s.GetByEventID(ctx, "w1"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("event w1, rolled back to the savepoint: %v; want no row", err)
	}
	if copies, statements := inserts(); copies != 2 || statements != 2 {
		t.Errorf("rows went in by %d COPY and %d INSERT statements; want 2 of each", copies, statements)
	}
	woken := map[string]bool{}
	for range 2 {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		kind, err := l.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting a minute for the commit's notifications: %v", err)
		}
		woken[kind] = true
	}
	if !woken["k"] || !woken["other"] {
		t.Errorf("notifications %v; want k and other", woken)
	}
}

// TestCopiesOfTheSameKeysKeepCommitOrder: two transactions copy events of
// the same keys, each in its own order; the one that commits first has
// its events first in every key, whichever copied first. Then producers
// copying shuffled batches of every key at once never deadlock, and each
// key has their events in line in one order, the order their
// transactions committed in.
func TestCopiesOfTheSameKeysKeepCommitOrder(t *testing.T) {
	drv := pgtest.Drivers[1].New()
	s := pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: 1})
	inserts := pgtest.WatchInserts(t, s)
	ctx := context.Background()
	begin := func() *sql.Tx {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		return tx
	}
	first, second := begin(), begin()
	if _, err := s.Enqueue(ctx, first, append(keyed("a", "first-a1", "first-a2"), keyed("b", "first-b1")...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, second, append(keyed("b", "second-b1"), keyed("a", "second-a1")...)...); err != nil {
		t.Fatal(err)
	}
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, s, map[string][]string{"a": {"second-a1", "first-a1", "first-a2"}, "b": {"second-b1", "first-b1"}})

	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
	const enqueuers, rounds = 4, 10
	pgtest.EnqueueShuffled(t, 19, keys, enqueuers, rounds, func(_ int, events []lease.Event) error {
		_, err := pgtest.EnqueueCommitted(ctx, s, events...)
		return err
	})
	rows, err := s.DB().QueryContext(ctx, `SELECT key, payload FROM `+s.QualifiedTable()+`
		WHERE key LIKE 'k_' ORDER BY key, key_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	lines := map[string][]string{}
	for rows.Next() {
		var key, payload string
		if err := rows.Scan(&key, &payload); err != nil {
			t.Fatal(err)
		}
		lines[key] = append(lines[key], payload)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if len(lines[k]) != enqueuers*rounds {
			t.Errorf("key %s has %d events in line; want %d", k, len(lines[k]), enqueuers*rounds)
		}
		if !slices.Equal(lines[k], lines[keys[0]]) {
			t.Errorf("key %s has its transactions' events in the order %v, key %s in %v; want one order, the commits'", k, lines[k], keys[0], lines[keys[0]])
		}
	}
	linesOf(t, s) // every keyed row in line
	if copies, statements := inserts(); copies != 2+enqueuers*rounds || statements != 0 {
		t.Errorf("rows went in by %d COPY and %d INSERT statements; want every batch copied", copies, statements)
	}
}

// TestCopyRunsTheTableChecks: rows copied into the table (lib/pq's COPY,
// as leasework.CopyTx) meet the schema's insert triggers as inserted rows
// do: metadata a claim could not read is refused with check_violation
// (23514), and the transaction is aborted.
func TestCopyRunsTheTableChecks(t *testing.T) {
	drv := pgtest.Drivers[1].New()
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	for _, bad := range []string{`{"n": 1}`, `{"tenant": ["acme"]}`, `[]`} {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ct, ok := s.WrapTx(tx).(leasework.CopyTx)
		if !ok {
			t.Fatalf("the pq store's WrapTx is a %T; want a leasework.CopyTx", s.WrapTx(tx))
		}
		n, err := ct.CopyFrom(ctx, []string{s.Schema(), s.Table()}, []string{"event_id", "kind", "metadata"},
			[][]any{{"good", "k", `{"a": "x"}`}, {"bad", "k", bad}})
		if got := ct.SQLState(err); got != "23514" {
			t.Errorf("copy of metadata %s: %d rows, %v (SQLSTATE %q); want check_violation, 23514", bad, n, err, got)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1"); drv.SQLState(err) != "25P02" {
			t.Errorf("a statement after the refused copy: %v; want 25P02, the transaction aborted", err)
		}
		tx.Rollback()
	}
}

// TestCopyPutsKeysInTheDatabasesOrder: in a database whose collation is
// not the bytes' order (ICU's en-US, where "a" < "B" < "b" < "é" < "_x"
// sorts otherwise), a copied batch's rows are in the order the INSERT
// gives them: keys sorted by the database, as the commit-time key locks
// are taken, not by their bytes.
func TestCopyPutsKeysInTheDatabasesOrder(t *testing.T) {
	ctx := context.Background()
	drv := pgtest.Drivers[1].New()
	admin := pgtest.Open(t, drv)
	name := "icu_" + strings.TrimPrefix(pgtest.SchemaName(), "t_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test server's DSN %q is no URL: %v", pgtest.DSN(t), err)
	}
	u.Path = "/" + name
	db, err := drv.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var sorted string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(k, ' ' ORDER BY k) FROM unnest('{b,B,a,é,_x}'::text[]) AS k`).Scan(&sorted); err != nil {
		t.Fatal(err)
	}
	if sorted == "B _x a b é" {
		t.Fatalf("the database sorts keys %q, as their bytes: it cannot tell the orders apart", sorted)
	}
	for _, skip := range []bool{false, true} {
		table := map[bool]string{false: "events", true: "skipping"}[skip]
		insert, err := lease.New(db, drv, lease.Options{Schema: "keys_order", Table: table, EnqueueCopyMin: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := insert.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		copying, err := lease.New(db, drv, lease.Options{Schema: "keys_order", Table: table, EnqueueCopyMin: 1})
		if err != nil {
			t.Fatal(err)
		}
		opts := lease.EnqueueOptions{SkipDuplicates: skip}
		in := enqueueCommitted(t, insert, opts, pgtest.CopyBatch("ins:", nil))
		cp := enqueueCommitted(t, copying, opts, pgtest.CopyBatch("cp:", nil))
		pgtest.CompareRows(t, insert, in, cp)
	}
}
