package framework_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// enqueueCharge enqueues the event "order-42-charge" in a transaction of its
// own with opts, and returns the result, or the error after rolling back.
func enqueueCharge(t *testing.T, s *lease.Store, opts lease.EnqueueOptions) (lease.Enqueued, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.EnqueueWith(ctx, tx, opts, lease.Event{EventID: "order-42-charge", Kind: "charge"})
	if err != nil {
		return lease.Enqueued{}, err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return out[0], nil
}

// chargeWorker starts a worker on s with cfg that counts the runs of its
// "charge" handler.
func chargeWorker(t *testing.T, s *lease.Store, cfg framework.Config) (*framework.Worker, *atomic.Int64) {
	t.Helper()
	cfg.Schema, cfg.Table, cfg.Logger = s.Schema(), s.Table(), testLogger()
	w, err := framework.New(s.DB(), s.Driver(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var charges atomic.Int64
	register(t, w, "charge", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		charges.Add(1)
		return nil
	})
	start(t, w)
	return w, &charges
}

// waitIdle waits until w has completed n events and s has none left to do.
func waitIdle(t *testing.T, w *framework.Worker, s *lease.Store, n int64) {
	t.Helper()
	waitFor(t, "the events completed and none left", func() bool {
		st, err := s.Stats(context.Background())
		return err == nil && st.Rows[leasework.StatusReady] == 0 && st.Rows[leasework.StatusInProgress] == 0 && w.Counters().Completed >= n
	})
}

// Under the default configuration, an event id stays a dedupe key after
// its event is completed: enqueueing "order-42-charge" again is
// leasework.ErrDuplicateEvent (Duplicate with SkipDuplicates), and the card
// is charged once.
func TestEventIDDedupesAfterCompletionByDefault(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w, charges := chargeWorker(t, s, framework.Config{}) // the default configuration
		first, err := enqueueCharge(t, s, lease.EnqueueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitIdle(t, w, s, 1)

		if _, err := enqueueCharge(t, s, lease.EnqueueOptions{}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("enqueue of the completed event's id: %v; want leasework.ErrDuplicateEvent", err)
		}
		again, err := enqueueCharge(t, s, lease.EnqueueOptions{SkipDuplicates: true})
		if err != nil || !again.Duplicate || again.ID != 0 {
			t.Errorf("enqueue with SkipDuplicates: %+v, %v; want reported Duplicate", again, err)
		}
		// A later event is handled: the worker had every chance to run a
		// second charge.
		pgtest.Enqueue(t, s, lease.Event{Kind: "charge", EventID: "order-43-charge"})
		waitIdle(t, w, s, 2)
		if c := w.Counters().Completed; c != 2 {
			t.Errorf("completed %d events; want 2 (order-42 once, order-43 once)", c)
		}
		if n := charges.Load(); n != 2 {
			t.Errorf("charge handler ran %d times for order-42 and order-43; want twice: order-42 charged once", n)
		}
		r, err := s.Get(context.Background(), first.ID)
		if err != nil || r.Status != leasework.StatusDone || r.Generation != 1 {
			t.Errorf("order-42-charge row = %+v, %v; want DONE at generation 1, kept", r, err)
		}
	})
}

// With DeleteAtCompletion, the row goes at completion, and with it the
// dedupe: the same event id enqueued again is a new event, handled again.
func TestDeleteAtCompletionGivesUpDedupe(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w, charges := chargeWorker(t, s, framework.Config{DeleteAtCompletion: true})
	first, err := enqueueCharge(t, s, lease.EnqueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, w, s, 1)
	if _, err := s.Get(context.Background(), first.ID); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("completed row: %v; want deleted at completion", err)
	}
	again, err := enqueueCharge(t, s, lease.EnqueueOptions{SkipDuplicates: true})
	if err != nil || again.Duplicate || again.ID == 0 || again.ID == first.ID {
		t.Fatalf("enqueue again: %+v, %v; want a new row", again, err)
	}
	waitIdle(t, w, s, 2)
	if n := charges.Load(); n != 2 {
		t.Errorf("charge handler ran %d times; want twice: a new event", n)
	}
}
