package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A keyed head cancelled while its handler runs keeps its key until that
// handler has returned: the renewal cancels the handler's context with
// cause ErrCancelled, the follower stays WAITING (and unclaimed) while the
// handler winds down, and only the outcome the worker writes once the
// handler has returned ends the head DISCARDED and lets the follower's
// handler start. The lease (a minute) never runs out in the test: the
// order is decided by the handler's return alone.
func TestCancelledHeadKeepsItsKeyUntilItsHandlerReturns(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{Lease: time.Minute, RenewEvery: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
		var mu sync.Mutex
		var history []string
		note := func(s string) {
			mu.Lock()
			defer mu.Unlock()
			history = append(history, s)
		}
		started := make(chan struct{}, 1)
		cause := make(chan error, 1)
		release := make(chan struct{})
		nextRan := make(chan struct{}, 1)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			if c.EventID == "next" {
				note("next started")
				nextRan <- struct{}{}
				return nil
			}
			note("head started")
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			<-release // winding down, past its context's end
			note("head returned")
			return nil
		})
		out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "acct", EventID: "head"},
			lease.Event{Kind: "k", Key: "acct", EventID: "next"})
		head, next := out[0].ID, out[1].ID
		stop := start(t, w)
		// Registered after start, so run before its stop: a failing test
		// does not leave the head's handler blocked.
		letGo := sync.OnceFunc(func() { close(release) })
		t.Cleanup(letGo)
		recv(t, started, "the head's handler to start")
		if _, err := s.Cancel(ctx, head, "withdrawn"); err != nil {
			t.Fatal(err)
		}
		got := recv(t, cause, "the head's handler to be cancelled")
		if !errors.Is(got, leasework.ErrCancelled) || errors.Is(got, leasework.ErrLeaseUnconfirmed) {
			t.Fatalf("cause = %v; want ErrCancelled", got)
		}
		// The handler has been told and still runs: the key is held.
		for _, id := range []int64{head, next} {
			r, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int64]leasework.Status{head: leasework.StatusInProgress, next: leasework.StatusWaiting}[id]
			if r.Status != want {
				t.Fatalf("row %s while the cancelled head's handler still runs: %s; want %s", r.EventID, r.Status, want)
			}
		}
		letGo()
		recv(t, nextRan, "the follower's handler to start")
		stop()
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"head started", "head returned", "next started"}; !slices.Equal(history, want) {
			t.Errorf("handler runs: %q; want %q", history, want)
		}
		r, err := s.Get(ctx, head)
		if err != nil || r.Status != leasework.StatusDiscarded || r.LastError != "cancelled: withdrawn" {
			t.Errorf("head: %+v, %v; want DISCARDED, cancelled: withdrawn", r, err)
		}
		if c := w.Counters(); c.Cancelled != 1 || c.Completed != 1 {
			t.Errorf("counters %+v; want 1 cancelled, 1 completed (the follower)", c)
		}
	})
}

// DISCARDED rows have a retention: kept as long as DONE rows
// (Config.Retention), and with DeleteAtCompletion, which keeps no DONE
// row, DedupeWindow. Age is a fixture (finished_at moved into the past).
func TestRetentionDeletesOldDiscardedRows(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  framework.Config
	}{
		{"Retention", framework.Config{Retention: framework.DedupeWindow}},
		{"DeleteAtCompletion", framework.Config{DeleteAtCompletion: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, pgtest.Drivers[0].New())
			ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "old"}, lease.Event{Kind: "k", EventID: "young"},
				lease.Event{Kind: "k", EventID: "failed"})
			for _, e := range ids[:2] {
				if _, err := s.Cancel(ctx, e.ID, ""); err != nil {
					t.Fatal(err)
				}
			}
			claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim = %v, %v", claims, err)
			}
			if _, err := s.Write(ctx, lease.Fail(claims[0].Ref(), "broken")); err != nil {
				t.Fatal(err)
			}
			for _, e := range []lease.Enqueued{ids[0], ids[2]} {
				execSQL(t, s, `UPDATE `+s.QualifiedTable()+` SET finished_at = finished_at - $2 * interval '1 microsecond' WHERE id = $1`,
					e.ID, (framework.DedupeWindow + time.Minute).Microseconds())
			}
			c.cfg.RetentionInterval = 20 * time.Millisecond
			w := newWorker(t, s, c.cfg)
			register(t, w, "other", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
			start(t, w)
			waitFor(t, "the old DISCARDED row deleted", func() bool { return w.Counters().RetentionDeleted == 1 })
			if _, err := s.Get(ctx, ids[0].ID); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("old DISCARDED row: %v; want deleted", err)
			}
			for _, e := range ids[1:] {
				if _, err := s.Get(ctx, e.ID); err != nil {
					t.Errorf("row %s: %v; want kept", e.EventID, err)
				}
			}
		})
	}
}

// A Transactional head cancelled while its fn runs, before a renewal has
// told the worker: its completion in the handler's transaction is rejected
// (the business write rolled back), and once the handler has returned the
// worker ends the head DISCARDED at once, as any cancelled attempt's
// outcome does, so the follower need not wait for the head's lease (a
// minute, never reached in the test; renewals every 30s, none in it).
func TestCancelledTransactionalHeadEndsOnceItReturns(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		table := effectsTable(t, s)
		w := newWorker(t, s, framework.Config{Lease: time.Minute, RenewEvery: 30 * time.Second, PollInterval: 20 * time.Millisecond})
		started := make(chan struct{}, 1)
		proceed := make(chan struct{})
		nextRan := make(chan struct{}, 1)
		registerTx(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			if c.EventID == "next" {
				nextRan <- struct{}{}
				return nil
			}
			started <- struct{}{}
			<-proceed
			return insertEffect(ctx, tx, table, c)
		})
		out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "acct", EventID: "head"},
			lease.Event{Kind: "k", Key: "acct", EventID: "next"})
		start(t, w)
		letGo := sync.OnceFunc(func() { close(proceed) })
		t.Cleanup(letGo)
		recv(t, started, "the head's handler to start")
		if res, err := s.Cancel(ctx, out[0].ID, ""); err != nil || !res.Stopping {
			t.Fatalf("cancel of the running head: %+v, %v; want Stopping", res, err)
		}
		letGo()
		recv(t, nextRan, "the follower's handler to start, before the head's lease ends")
		r, err := s.Get(ctx, out[0].ID)
		if err != nil || r.Status != leasework.StatusDiscarded {
			t.Fatalf("head: %+v, %v; want DISCARDED", r, err)
		}
		if n := effectCounts(t, s, table)["head"]; n != 0 {
			t.Errorf("the cancelled head's business write committed %d times; want rolled back", n)
		}
		waitFor(t, "the follower completed", func() bool { return w.Counters().Completed == 1 })
		if c := w.Counters(); c.Cancelled != 1 {
			t.Errorf("counters %+v; want the head counted cancelled", c)
		}
	})
}
