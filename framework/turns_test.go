package framework_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A worker runs a key's events one after another without a claim
// statement for each: every completion takes the key's next event for the
// worker (lease.Store.WriteManyTakingTurns). With polling out of the way
// (an hour), the worker claims the head, and every later event reaches a
// handler through its predecessor's completion: the events run in order,
// and the claim statements number a few (the first, and at most one
// after a wakeup), not one per event.
func TestWorkerTakesTheTurnsOfTheKeysItFinishes(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const events = 30
		s := newStore(t, drv)
		batch := make([]lease.Event, events)
		for i := range batch {
			batch[i] = lease.Event{Kind: "k", Key: "chain", Payload: []byte(strconv.Itoa(i))}
		}
		pgtest.Enqueue(t, s, batch...)
		w := newWorker(t, s, framework.Config{PollInterval: time.Hour, Lease: time.Hour})
		var mu sync.Mutex
		var ran []int
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			n, err := strconv.Atoi(string(c.Payload))
			if err != nil {
				return leasework.Permanent(err)
			}
			mu.Lock()
			ran = append(ran, n)
			mu.Unlock()
			return nil
		})
		stop := start(t, w)
		waitFor(t, "every event of the key completed", func() bool { return w.Counters().Completed == events })
		stop()
		mu.Lock()
		defer mu.Unlock()
		for i, n := range ran {
			if n != i {
				t.Fatalf("the key's events ran in the order %v", ran)
			}
		}
		if c := w.Counters(); c.ClaimQueries > 3 {
			t.Errorf("%d claim statements for %d events of one key; the completions should have taken the turns", c.ClaimQueries, events)
		}
	})
}

// A large batch of completions that take their keys' turns goes out as
// two statements at once, and every key's order holds through it. The
// heads of 300 keys run together; their rows are held by a transaction of
// the test while they return, so that the writer's first statement waits
// and the other outcomes queue behind it; once the rows are let go, a
// batch of at least SplitFrom outcomes is written in two halves. Each
// key's three events run in order, never two at once, each once, and end
// DONE.
func TestLargeBatchTakingTurnsIsWrittenInTwo(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const keys, perKey = 300, 3
		ctx := context.Background()
		s := newStore(t, drv)
		for n := range perKey {
			batch := make([]lease.Event, keys)
			for k := range batch {
				batch[k] = lease.Event{Kind: "k", Key: fmt.Sprintf("key-%d", k), Payload: []byte(strconv.Itoa(n))}
			}
			pgtest.Enqueue(t, s, batch...)
		}
		w := newWorker(t, s, framework.Config{PollInterval: time.Hour, Lease: time.Hour, Concurrency: 1000})
		var mu sync.Mutex
		var splits []int
		framework.OnSplitWrite(w, func(n int) {
			mu.Lock()
			splits = append(splits, n)
			mu.Unlock()
		})
		running, ran := map[string]bool{}, map[string][]int{}
		var overlaps []string
		var started atomic.Int64
		gate := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			n, err := strconv.Atoi(string(c.Payload))
			if err != nil {
				return leasework.Permanent(err)
			}
			mu.Lock()
			if running[c.Key] {
				overlaps = append(overlaps, c.Key)
			}
			running[c.Key] = true
			ran[c.Key] = append(ran[c.Key], n)
			mu.Unlock()
			if started.Add(1) <= keys {
				<-gate // the heads return together
			}
			mu.Lock()
			running[c.Key] = false
			mu.Unlock()
			return nil
		})
		stop := start(t, w)
		waitFor(t, "every key's head running", func() bool { return started.Load() == keys })
		hold, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Rollback()
		table := ident(s.Schema()) + "." + ident(s.Table())
		if _, err := hold.ExecContext(ctx, "SELECT id FROM "+table+" WHERE status = 'INPROGRESS' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		close(gate)
		// The first statement takes what was queued when it began, and
		// waits for the rows: either it is large enough to be split, or
		// the rest is.
		waitFor(t, "a batch of at least SplitFrom outcomes", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(splits) > 0 || framework.QueuedOutcomes(w) >= framework.SplitFrom
		})
		if err := hold.Rollback(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == keys*perKey })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(splits) == 0 {
			t.Fatalf("no batch was written in two; at least one of %d outcomes was queued", framework.SplitFrom)
		}
		for _, n := range splits {
			if n < framework.SplitFrom {
				t.Errorf("a batch of %d outcomes was written in two; want at least %d", n, framework.SplitFrom)
			}
		}
		if len(overlaps) > 0 {
			t.Errorf("events of one key ran at once: %v", overlaps)
		}
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			if got := ran[key]; !slices.Equal(got, []int{0, 1, 2}) {
				t.Errorf("%s's events ran in the order %v; want [0 1 2]", key, got)
			}
		}
		var done int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE status = 'DONE'").Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done != keys*perKey {
			t.Errorf("%d rows DONE; want %d", done, keys*perKey)
		}
	})
}
