package pgx_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// newPool returns the application's own pgx pool on the test server.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// begin begins a transaction on pool, rolled back at the end of the test
// unless committed.
func begin(t *testing.T, pool *pgxpool.Pool) pgxv5.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// listen listens on s's channel with the pgx driver, on db.
func listen(t *testing.T, s *lease.Store) leasework.Listener {
	t.Helper()
	l, err := pgxdriver.New().Listen(context.Background(), s.DB(), s.Channel())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// eachWay runs f once per way EnqueueTx writes a pgx.Tx's events, with
// the store's Options.EnqueueCopyMin that selects it: one INSERT, and
// pgx's CopyFrom for every batch.
func eachWay(t *testing.T, f func(t *testing.T, copyMin int)) {
	for _, w := range []struct {
		name    string
		copyMin int
	}{{"insert", -1}, {"copy", 1}} {
		t.Run(w.name, func(t *testing.T) { f(t, w.copyMin) })
	}
}

// next returns the payload of the next notification on l.
func next(t *testing.T, l leasework.Listener) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	payload, err := l.Wait(ctx)
	if err != nil {
		t.Fatalf("waiting for a notification: %v", err)
	}
	return payload
}

// Events enqueued in a pgx transaction that commits are rows of the table,
// with the store's defaults, invisible before the commit; the commit
// notifies listeners with the events' kind. Both ways: the batch mixes
// events with RunAt and without, which a COPY leaves to the INSERT; see
// TestEnqueueInPgxTxCopiesWhatItInserts for the copies.
func TestEnqueueInPgxTxCommits(t *testing.T) { eachWay(t, testEnqueueInPgxTxCommits) }

func testEnqueueInPgxTxCommits(t *testing.T, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{MaxAttempts: 7, EnqueueCopyMin: copyMin})
	pool := newPool(t)
	l := listen(t, s)

	tx := begin(t, pool)
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE orders (id text) ON COMMIT DROP`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('order-42')`); err != nil { // the business write
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	out, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{EventID: "order-42-placed", Kind: "order.placed", Key: "order-42", Payload: []byte(`{"total":42}`)},
		lease.Event{Kind: "order.audit", MaxAttempts: 3, RunAt: runAt})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].EventID != "order-42-placed" || out[0].ID == 0 || out[1].ID == 0 ||
		out[1].EventID == "" || out[0].Duplicate || out[1].Duplicate {
		t.Fatalf("enqueued %+v; want two new rows, the second with a generated event id", out)
	}
	if _, err := s.GetByEventID(ctx, "order-42-placed"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("before commit, GetByEventID: %v; want lease.ErrNotFound", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := s.Get(ctx, out[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.EventID != "order-42-placed" || r.Kind != "order.placed" || r.Key != "order-42" ||
		string(r.Payload) != `{"total":42}` || r.Status != leasework.StatusReady || r.MaxAttempts != 7 {
		t.Errorf("first row %+v; want the event as given, READY, with the store's 7 attempts", r)
	}
	r, err = s.Get(ctx, out[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.EventID != out[1].EventID || r.MaxAttempts != 3 || !r.NextAttemptAt.Equal(runAt) || r.Payload == nil || len(r.Payload) != 0 {
		t.Errorf("second row %+v; want event id %q, 3 attempts, due at %v, an empty payload", r, out[1].EventID, runAt)
	}
	got := map[string]bool{next(t, l): true, next(t, l): true}
	if !got["order.placed"] || !got["order.audit"] {
		t.Errorf("notifications %v; want one per kind", got)
	}
}

// Events enqueued in a pgx transaction that rolls back leave no row and
// wake nobody. Both ways.
func TestEnqueueInPgxTxRollsBack(t *testing.T) { eachWay(t, testEnqueueInPgxTxRollsBack) }

func testEnqueueInPgxTxRollsBack(t *testing.T, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{EnqueueCopyMin: copyMin})
	inserts := pgtest.WatchInserts(t, s)
	pool := newPool(t)
	l := listen(t, s)

	tx := begin(t, pool)
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{EventID: "gone", Kind: "rolled.back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetByEventID(ctx, "gone"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after rollback, GetByEventID: %v; want lease.ErrNotFound", err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[leasework.StatusReady] != 0 {
		t.Errorf("stats after rollback %+v; want no row", st)
	}
	// The next notification is the committed event's: the rolled-back one
	// sent none.
	tx = begin(t, pool)
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{Kind: "committed"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(t, l); got != "committed" {
		t.Errorf("first notification %q; want %q (none from the rolled-back transaction)", got, "committed")
	}
	checkInsertsBy(t, inserts, copyMin > 0)
}

// checkInsertsBy checks that the rows counted by inserts (of
// pgtest.WatchInserts) went in with COPY only, or with INSERT only.
func checkInsertsBy(t *testing.T, inserts func() (copies, statements int), copied bool) {
	t.Helper()
	copies, statements := inserts()
	if copied && (copies == 0 || statements != 0) || !copied && (copies != 0 || statements == 0) {
		t.Errorf("the enqueues' rows went in by %d COPY and %d INSERT statements; want them all by %s",
			copies, statements, map[bool]string{true: "COPY", false: "INSERT"}[copied])
	}
}

// An event id that exists is leasework.ErrDuplicateEvent, whichever driver
// the store uses, and it aborts the transaction (PostgreSQL refuses its later
// statements) without changing the existing row. Two events sharing an id
// in one call fail before anything is sent: the transaction stays usable.
// Both ways.
func TestEnqueueInPgxTxDuplicate(t *testing.T) {
	eachWay(t, func(t *testing.T, copyMin int) {
		pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) { testEnqueueInPgxTxDuplicate(t, drv, copyMin) })
	})
}

func testEnqueueInPgxTxDuplicate(t *testing.T, drv leasework.Driver, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: copyMin})
	pool := newPool(t)
	first := pgtest.Enqueue(t, s, lease.Event{EventID: "order-42-charge", Kind: "charge", Payload: []byte("first")})

	tx := begin(t, pool)
	_, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{EventID: "a", Kind: "charge"}, lease.Event{EventID: "a", Kind: "charge"})
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		t.Fatalf("two events sharing an id: %v; want leasework.ErrDuplicateEvent", err)
	}
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatalf("the transaction after an in-call duplicate: %v; want it usable", err)
	}

	_, err = s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{EventID: "order-42-charge", Kind: "charge", Payload: []byte("second")})
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		t.Fatalf("an existing id: %v; want leasework.ErrDuplicateEvent", err)
	}
	err = tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
	if got := pgxdriver.New().SQLState(err); got != "25P02" {
		t.Errorf("a statement after the duplicate: %v (SQLSTATE %q); want 25P02, the transaction aborted", err, got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, first[0].ID)
	if err != nil || string(r.Payload) != "first" {
		t.Errorf("existing row %+v, %v; want it unchanged", r, err)
	}
	if _, err := s.GetByEventID(ctx, "a"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("event a: %v; want never inserted", err)
	}
}

// With SkipDuplicates, existing ids and repeats within the call are
// reported Duplicate, the rest inserted, and the transaction commits.
// Both ways.
func TestEnqueueInPgxTxSkipDuplicates(t *testing.T) { eachWay(t, testEnqueueInPgxTxSkipDuplicates) }

func testEnqueueInPgxTxSkipDuplicates(t *testing.T, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{EnqueueCopyMin: copyMin})
	inserts := pgtest.WatchInserts(t, s)
	pool := newPool(t)
	old := pgtest.Enqueue(t, s, lease.Event{EventID: "old", Kind: "k", Payload: []byte("kept")})

	tx := begin(t, pool)
	out, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{EventID: "new", Kind: "k", Payload: []byte("1")},
		lease.Event{EventID: "old", Kind: "k", Payload: []byte("replaced?")},
		lease.Event{EventID: "new", Kind: "k", Payload: []byte("2")})
	if err != nil {
		t.Fatal(err)
	}
	if !(out[0].ID != 0 && !out[0].Duplicate && out[1].ID == 0 && out[1].Duplicate && out[2].ID == 0 && out[2].Duplicate) {
		t.Fatalf("enqueued %+v; want new inserted, old and the repeat of new Duplicate", out)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, old[0].ID); err != nil || string(r.Payload) != "kept" {
		t.Errorf("old row %+v, %v; want unchanged", r, err)
	}
	if r, err := s.GetByEventID(ctx, "new"); err != nil || r.ID != out[0].ID || string(r.Payload) != "1" {
		t.Errorf("new row %+v, %v; want the first of the call", r, err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Rows[leasework.StatusReady] != 2 {
		t.Errorf("stats %+v, %v; want 2 READY rows", st, err)
	}
	if copies, statements := inserts(); copyMin > 0 && (copies != 1 || statements != 1) || copyMin < 0 && (copies != 0 || statements != 2) {
		t.Errorf("rows went in by %d COPY and %d INSERT statements; want the store's enqueue by INSERT, EnqueueTx's by %s",
			copies, statements, map[bool]string{true: "COPY", false: "INSERT"}[copyMin > 0])
	}
}

// An invalid event fails the call before anything is sent, naming its index
// and field; the transaction stays usable.
func TestEnqueueInPgxTxValidates(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	tx := begin(t, newPool(t))
	_, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{Kind: "k"}, lease.Event{Kind: "k", Key: "bad\x00key"})
	if err == nil || !strings.Contains(err.Error(), "event 1: Key") {
		t.Fatalf("invalid key: %v; want an error naming event 1 and Key", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Errorf("the transaction after a refused event: %v; want it usable", err)
	}
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(nil), lease.EnqueueOptions{}, lease.Event{Kind: "k"}); err == nil {
		t.Error("a nil tx: no error")
	}
}

// The pgx driver listens on a pool made by stdlib.OpenDBFromPool from the
// application's pgxpool, on a connection of its own.
func TestListenOnOpenDBFromPool(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	pool := newPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	l, err := pgxdriver.New().Listen(ctx, db, s.Channel())
	if err != nil {
		t.Fatalf("listen on stdlib.OpenDBFromPool: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	tx := begin(t, pool)
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{Kind: "probe"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(t, l); got != "probe" {
		t.Fatalf("notification %q; want probe", got)
	}
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Errorf("the pool has %d connections acquired while listening; want none: the listener's connection is its own", st.AcquiredConns())
	}
}

// A worker shares the application's pgxpool through stdlib.OpenDBFromPool,
// and a worker that would poll only once a day handles an event enqueued in
// a pgx transaction, woken by its notification.
func TestWorkerOnApplicationPgxPool(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })

	w, err := framework.New(db, pgxdriver.New(), framework.Config{
		Schema: pgtest.SchemaName(), PollInterval: framework.MaxPollInterval, Concurrency: 1,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := w.Store()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.DropSchema(context.Background()) })

	handled := make(chan string, 1)
	var calls atomic.Int64
	if err := w.Register("greet", leasework.HandlerFunc(func(_ context.Context, c *leasework.Claim) error {
		calls.Add(1)
		handled <- c.EventID
		return nil
	}), framework.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// Wait until the worker listens (a connection has run its LISTEN) and
	// has made its claims on start and on listening; from then on only a
	// notification can make it claim before a day has passed.
	deadline := time.Now().Add(time.Minute)
	for {
		var listening bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN ' || $1)`,
			pgxv5.Identifier{s.Channel()}.Sanitize()).Scan(&listening)
		if err != nil {
			t.Fatal(err)
		}
		if listening && w.Counters().ClaimQueries >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker is not listening after a minute (listening %v, claims %d)", listening, w.Counters().ClaimQueries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tx := begin(t, pool)
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, lease.Event{EventID: "greet-1", Kind: "greet"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-handled:
		if id != "greet-1" {
			t.Errorf("handled %q; want greet-1", id)
		}
	case <-time.After(time.Minute):
		t.Fatal("the event was not handled within a minute (its poll is a day away): the worker was not woken")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
}

// Every event is accounted for in a pgx transaction too: one that the table
// dropped without an error (a trigger here) fails the call, naming it.
// Both ways: a COPY reports how many rows the table took, and the call
// then reads which.
func TestEnqueueInPgxTxAccountsForEveryEvent(t *testing.T) {
	eachWay(t, testEnqueueInPgxTxAccountsForEveryEvent)
}

func testEnqueueInPgxTxAccountsForEveryEvent(t *testing.T, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{EnqueueCopyMin: copyMin})
	if err := leasetest.DropInsertsOfKind(ctx, s, "vanish"); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t)
	for _, skip := range []bool{false, true} {
		tx := begin(t, pool)
		out, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{SkipDuplicates: skip},
			lease.Event{Kind: "k", EventID: "kept"}, lease.Event{Kind: "vanish", EventID: "dropped"})
		if err == nil || !strings.Contains(err.Error(), `event 1 (event id "dropped")`) {
			t.Errorf("SkipDuplicates %v: %+v, %v; want an error naming event 1 (\"dropped\")", skip, out, err)
		}
		_ = tx.Rollback(ctx)
	}
}
