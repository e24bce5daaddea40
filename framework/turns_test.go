package framework_test

import (
	"context"
	"strconv"
	"sync"
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
