package framework_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestCompletesRegisteredKindsOnly(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		var events []lease.Event
		for i := range 40 {
			events = append(events, lease.Event{Kind: "mine", EventID: fmt.Sprintf("mine-%d", i)})
		}
		for i := range 5 {
			events = append(events, lease.Event{Kind: "other", EventID: fmt.Sprintf("other-%d", i)})
		}
		pgtest.Enqueue(t, s, events...)

		w := newWorker(t, s, framework.Config{Concurrency: 4})
		var mu sync.Mutex
		seen := map[string]int{}
		register(t, w, "mine", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			mu.Lock()
			seen[c.EventID]++
			mu.Unlock()
			if c.Generation != 1 || c.Attempt != 1 {
				return leasework.Permanent(fmt.Errorf("claim %+v: want generation 1, attempt 1", c))
			}
			return nil
		})
		stop := start(t, w)
		waitFor(t, "40 completions", func() bool { return w.Counters().Completed == 40 })
		stop()

		ctx := context.Background()
		for _, st := range []struct {
			kind   string
			status leasework.Status
			n      int
		}{{"mine", leasework.StatusDone, 40}, {"other", leasework.StatusReady, 5}} {
			rows, err := s.List(ctx, lease.ListRequest{Kind: st.kind})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != st.n {
				t.Fatalf("%d rows of kind %s; want %d", len(rows), st.kind, st.n)
			}
			for _, r := range rows {
				if r.Status != st.status || r.LeaseUntil != nil {
					t.Errorf("row %s: %s, lease %v; want %s without lease", r.EventID, r.Status, r.LeaseUntil, st.status)
				}
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("event %s handled %d times; want once", id, n)
			}
		}
		c := w.Counters()
		if c.Claimed != 40 || c.Completed != 40 || c.Failed != 0 || c.StaleRejections != 0 {
			t.Errorf("counters %+v; want 40 claimed and completed, nothing else", c)
		}
	})
}

// A zero Retention (the default) keeps DONE rows, for the dedupe window;
// DeleteAtCompletion deletes them in the completion's statement.
func TestZeroRetentionKeepsDoneRowsDeleteAtCompletionDeletes(t *testing.T) {
	for _, deleteAtCompletion := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeleteAtCompletion=%v", deleteAtCompletion), func(t *testing.T) {
			s := newStore(t, pgtest.Drivers[0].New())
			ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k"}, lease.Event{Kind: "k"})
			cfg := framework.Config{Schema: s.Schema(), Table: s.Table(), Logger: testLogger(), // Retention zero
				DeleteAtCompletion: deleteAtCompletion}
			w, err := framework.New(s.DB(), s.Driver(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
			stop := start(t, w)
			waitFor(t, "2 completions", func() bool { return w.Counters().Completed == 2 })
			stop()
			for _, e := range ids {
				r, err := s.Get(context.Background(), e.ID)
				switch {
				case deleteAtCompletion && !errors.Is(err, lease.ErrNotFound):
					t.Errorf("row %d after completion: %+v, %v; want deleted", e.ID, r, err)
				case !deleteAtCompletion && (err != nil || r.Status != leasework.StatusDone):
					t.Errorf("row %d after completion: %+v, %v; want kept DONE", e.ID, r, err)
				}
			}
		})
	}
}

func TestWorkersShareTheWork(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	const n = 300
	var events []lease.Event
	for i := range n {
		events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprint(i)})
	}
	pgtest.Enqueue(t, s, events...)
	var mu sync.Mutex
	seen := map[string]int{}
	var workers []*framework.Worker
	for i := range 3 {
		w := newWorker(t, s, framework.Config{WorkerID: fmt.Sprint("w", i), Concurrency: 5})
		register(t, w, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
			mu.Lock()
			seen[c.EventID]++
			mu.Unlock()
			return nil
		})
		workers = append(workers, w)
		start(t, w)
	}
	total := func() (sum int64) {
		for _, w := range workers {
			sum += w.Counters().Completed
		}
		return sum
	}
	waitFor(t, "every event completed", func() bool { return total() == n })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("%d distinct events handled; want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s handled %d times; want once", id, k)
		}
	}
}

func TestClaimFromContext(t *testing.T) {
	if _, ok := framework.ClaimFromContext(context.Background()); ok {
		t.Error("ClaimFromContext(Background) reported a claim")
	}
	if err := framework.RecordProgress(context.Background(), nil); !errors.Is(err, framework.ErrNoClaim) {
		t.Errorf("RecordProgress(Background) = %v; want ErrNoClaim", err)
	}
	s := newStore(t, pgtest.Drivers[0].New())
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e1", Key: "agg-7", Payload: []byte("body")})
	w := newWorker(t, s, framework.Config{})
	got := make(chan leasework.Claim, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		fromCtx, ok := framework.ClaimFromContext(ctx)
		if !ok || fromCtx != c {
			return leasework.Permanent(errors.New("claim missing from the context"))
		}
		got <- *c
		return nil
	})
	start(t, w)
	c := recv(t, got, "the claim")
	if c.EventID != "e1" || c.Key != "agg-7" || string(c.Payload) != "body" || c.Kind != "k" ||
		c.Generation != 1 || c.Attempt != 1 || c.LeaseUntil.IsZero() {
		t.Errorf("claim %+v: want event e1, key agg-7, payload body, generation 1, attempt 1, a lease", c)
	}
}
