package leaseworktest_test

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/leaseworktest"
)

func begin(t *testing.T, s *lease.Store) *sql.Tx {
	t.Helper()
	tx, err := s.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx
}

func ids(rows []lease.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.EventID)
	}
	return out
}

func TestRequireEnqueuedTx(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		pgtest.Enqueue(t, s, lease.Event{EventID: "committed", Kind: "order.placed"})

		tx := begin(t, s)
		// Enqueue inserts keyless events first (in key order): b's id is a's
		// less one, and rows come in id order.
		if _, err := s.Enqueue(ctx, tx,
			lease.Event{EventID: "a", Kind: "order.placed", Queue: "orders", Priority: 1, Key: "order-1"},
			lease.Event{EventID: "b", Kind: "order.placed", Queue: "orders", Priority: 3},
			lease.Event{EventID: "c", Kind: "order.shipped"},
		); err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			kind string
			opts *leaseworktest.EnqueuedOptions
			want []string
		}{
			{"order.placed", nil, []string{"committed", "b", "a"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{}, []string{"committed", "b", "a"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders"}, []string{"b", "a"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Queue: "default"}, []string{"committed"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Priority: new(0)}, []string{"committed"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Priority: new(3)}, []string{"b"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Key: "order-1"}, []string{"a"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Status: leasework.StatusReady, Count: 3}, []string{"committed", "b", "a"}},
			{"order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders", Priority: new(1), Count: 1}, []string{"a"}},
			{"order.shipped", nil, []string{"c"}},
		} {
			if got := ids(leaseworktest.RequireEnqueuedTx(t, ctx, s.WrapTx(tx), s, tc.kind, tc.opts)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s %+v: %v, want %v", tc.kind, tc.opts, got, tc.want)
			}
		}
		leaseworktest.RequireNotEnqueuedTx(t, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders", Priority: new(2)})
		leaseworktest.RequireNotEnqueuedTx(t, ctx, s.WrapTx(tx), s, "order.cancelled", nil)

		// Outside the transaction, only what was committed.
		if got := ids(leaseworktest.RequireEnqueued(t, ctx, s, "order.placed", nil)); !reflect.DeepEqual(got, []string{"committed"}) {
			t.Errorf("outside the transaction: %v", got)
		}
		leaseworktest.RequireNotEnqueued(t, ctx, s, "order.shipped", nil)
		leaseworktest.RequireNotEnqueued(t, ctx, s, "order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders"})

		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := ids(leaseworktest.RequireEnqueued(t, ctx, s, "order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders", Count: 2})); !reflect.DeepEqual(got, []string{"b", "a"}) {
			t.Errorf("after the commit: %v", got)
		}
		leaseworktest.RequireEnqueued(t, ctx, s, "order.shipped", &leaseworktest.EnqueuedOptions{Count: 1})
	})
}

// The rows are those lease.Store.Get reads, every field of them, in every
// state a row can be in.
func TestRequireEnqueuedRowsAreTheStoresRows(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		pgtest.Enqueue(t, s,
			lease.Event{EventID: "done", Kind: "k", Payload: []byte(`{"n":1}`)},
			lease.Event{EventID: "running", Kind: "k", Key: "key-1", Queue: "q", Priority: 5, MaxAttempts: 3},
			lease.Event{EventID: "later", Kind: "k", RunAt: time.Now().Add(time.Hour)},
		)
		for _, q := range []string{lease.DefaultQueue, "q"} {
			claims, err := s.Claim(ctx, lease.ClaimRequest{Kinds: []string{"k"}, Limit: 10, Lease: time.Minute, Worker: "w1", Queue: q})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range claims {
				switch c.EventID {
				case "done":
					if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
						t.Fatal(err)
					}
				case "running":
					if _, err := s.Write(ctx, lease.Progress(c.Ref(), []byte("page 3"))); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		rows := leaseworktest.RequireEnqueued(t, ctx, s, "k", &leaseworktest.EnqueuedOptions{Count: 3})
		statuses := map[leasework.Status]bool{}
		for _, r := range rows {
			want, err := s.Get(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("row %d\n got %+v\nwant %+v", r.ID, r, want)
			}
			statuses[r.Status] = true
		}
		if len(statuses) != 3 {
			t.Errorf("statuses %v, want DONE, INPROGRESS and READY", statuses)
		}
	})
}

func TestRequireEnqueuedFailures(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	tx := begin(t, s)
	if _, err := s.Enqueue(ctx, tx,
		lease.Event{EventID: "a", Kind: "order.placed", Queue: "orders", Priority: 1},
		lease.Event{EventID: "b", Kind: "order.placed", Key: "order-2"},
	); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		run  func(tb testing.TB)
		want []string
	}{
		{"no row of the kind", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.cancelled", nil)
		}, []string{`no event of kind "order.cancelled" is in the transaction (nor any other of kind "order.cancelled")`}},
		{"no row that matches", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders", Priority: new(2)})
		}, []string{
			`no event of kind "order.placed" in queue "orders" with priority 2 is in the transaction; of kind "order.placed" it sees 2 others:`,
			`event "a" queue "orders" priority 1 READY`,
			`event "b" queue "default" priority 0 key "order-2" READY`,
		}},
		{"not as many", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Count: 3})
		}, []string{`2 events of kind "order.placed" are in the transaction, want 3:`, `event "a"`, `event "b"`, `(nor any other`}},
		{"committed only", func(tb testing.TB) {
			leaseworktest.RequireEnqueued(tb, ctx, s, "order.placed", nil)
		}, []string{`no event of kind "order.placed" is in the table`}},
		{"one that should not be", func(tb testing.TB) {
			leaseworktest.RequireNotEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Key: "order-2", Status: leasework.StatusReady})
		}, []string{`1 event of kind "order.placed" with key "order-2" in status READY is in the transaction, want none:`, `event "b"`}},
		{"a negative count", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Count: -1})
		}, []string{"Count is -1"}},
		{"an unknown status", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Status: "SENT"})
		}, []string{`Status "SENT" is not a status`}},
		{"a nil tx", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedTx(tb, ctx, nil, s, "order.placed", nil)
		}, []string{"tx is nil"}},
		{"a nil store", func(tb testing.TB) {
			leaseworktest.RequireEnqueued(tb, ctx, nil, "order.placed", nil)
		}, []string{"the store is nil"}},
		{"args that do not decode", func(tb testing.TB) {
			leaseworktest.RequireEnqueuedKindTx(tb, ctx, s.WrapTx(tx), s, lease.Kind[string]{Name: "order.placed", Codec: brokenCodec{}}, nil)
		}, []string{`event "a"`, "no decoder"}},
	} {
		msg := failure(t, tc.run)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: failure\n%s\nwant it to contain\n%s", tc.name, msg, w)
			}
		}
	}

	// Many rows are listed up to a bound.
	events := make([]lease.Event, 30)
	for i := range events {
		events[i] = lease.Event{Kind: "bulk"}
	}
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	msg := failure(t, func(tb testing.TB) {
		leaseworktest.RequireNotEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "bulk", nil)
	})
	if !strings.Contains(msg, "30 events") || !strings.Contains(msg, "... and 10 more") || strings.Count(msg, "\n\trow ") != 20 {
		t.Errorf("failure listing 30 rows:\n%s", msg)
	}

	// A transaction an error aborted says so.
	if _, err := tx.ExecContext(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	if msg := failure(t, func(tb testing.TB) { leaseworktest.RequireEnqueuedTx(tb, ctx, s.WrapTx(tx), s, "order.placed", nil) }); !strings.Contains(msg, "aborted") {
		t.Errorf("an aborted transaction: %q", msg)
	}
}

func TestRequireEnqueuedKind(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		tx := begin(t, s)
		if _, err := sendEmail.Enqueue(ctx, s, tx, email{To: "ada@example.com"}, email{To: "alan@example.com"}); err != nil {
			t.Fatal(err)
		}
		rows := leaseworktest.RequireEnqueuedKindTx(t, ctx, s.WrapTx(tx), s, sendEmail, &leaseworktest.EnqueuedOptions{Queue: "mail", Priority: new(2), Count: 2})
		if rows[0].Args.To != "ada@example.com" || rows[1].Args.To != "alan@example.com" || rows[0].Kind != "email.send" || rows[1].MaxAttempts != 5 {
			t.Errorf("rows %+v", rows)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		rows = leaseworktest.RequireEnqueuedKind(t, ctx, s, sendEmail, &leaseworktest.EnqueuedOptions{Count: 2})
		if rows[1].Args.To != "alan@example.com" {
			t.Errorf("rows %+v", rows)
		}
	})
}

// A pgx transaction is asserted on as a database/sql one is: what it
// enqueued and has not committed is visible in it, and only in it.
func TestRequireEnqueuedPgxTx(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	pool, err := pgxpool.New(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })

	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{EventID: "order-1-placed", Kind: "order.placed", Key: "order-1", Queue: "orders"},
		lease.Event{EventID: "order-2-placed", Kind: "order.placed", Key: "order-2", Queue: "orders"},
	); err != nil {
		t.Fatal(err)
	}
	rows := leaseworktest.RequireEnqueuedTx(t, ctx, pgxdriver.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Queue: "orders", Count: 2})
	if got := ids(rows); !reflect.DeepEqual(got, []string{"order-1-placed", "order-2-placed"}) {
		t.Errorf("rows %v", got)
	}
	leaseworktest.RequireNotEnqueuedTx(t, ctx, pgxdriver.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Key: "order-3"})
	leaseworktest.RequireNotEnqueued(t, ctx, s, "order.placed", nil)

	msg := failure(t, func(tb testing.TB) {
		leaseworktest.RequireEnqueuedTx(tb, ctx, pgxdriver.WrapTx(tx), s, "order.placed", &leaseworktest.EnqueuedOptions{Key: "order-3"})
	})
	if !strings.Contains(msg, "order-1-placed") || !strings.Contains(msg, "order-2-placed") {
		t.Errorf("failure %q; want it to list the rows of the kind that did not match", msg)
	}
	if msg := failure(t, func(tb testing.TB) {
		leaseworktest.RequireEnqueuedTx(tb, ctx, pgxdriver.WrapTx(nil), s, "order.placed", nil)
	}); !strings.Contains(msg, "tx is nil") {
		t.Errorf("nil pgx.Tx: failure %q", msg)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	leaseworktest.RequireEnqueued(t, ctx, s, "order.placed", &leaseworktest.EnqueuedOptions{Count: 2})
}
