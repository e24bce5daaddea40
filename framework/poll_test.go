package framework_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// pollOnly hides a driver's optional capabilities, leaving the worker to
// poll.
type pollOnly struct{ leasework.Driver }

// An idle worker sends at most one claim per poll interval, plus the one at
// start and the one after LISTEN takes effect.
func TestIdleWorkerPollsNoFasterThanItsInterval(t *testing.T) {
	for _, d := range pgtest.Drivers {
		for _, notify := range []bool{true, false} {
			name := d.Name + "/notify"
			if !notify {
				name = d.Name + "/poll-only"
			}
			t.Run(name, func(t *testing.T) {
				drv := d.New()
				if !notify {
					drv = pollOnly{drv}
				}
				s := newStore(t, drv)
				const interval = 50 * time.Millisecond
				w := newWorker(t, s, framework.Config{PollInterval: interval})
				register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
				begin := time.Now()
				stop := start(t, w)
				waitFor(t, "a few polls", func() bool { return w.Counters().ClaimQueries >= 4 })
				stop()
				elapsed := time.Since(begin)
				n := w.Counters().ClaimQueries
				if limit := int64(elapsed/interval) + 2; n > limit {
					t.Errorf("%d claim queries in %v at a poll interval of %v; want at most %d", n, elapsed, interval, limit)
				}
			})
		}
	}
}

// With a poll interval of an hour, only a notification can wake an idle
// worker: an event enqueued after it went idle is picked up at once.
func TestNotificationWakesIdleWorker(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: time.Hour})
		got := make(chan string, 2)
		handler := func(_ context.Context, c *leasework.Claim) error { got <- c.EventID; return nil }
		register(t, w, "k", framework.RetryPolicy{}, handler)
		start(t, w)
		recv(t, framework.Listening(w), "the worker to listen")
		waitFor(t, "the worker to go idle", func() bool { return w.Counters().ClaimQueries >= 1 })
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "woken"})
		if id := recv(t, got, "the notified event"); id != "woken" {
			t.Fatalf("handled %q; want woken", id)
		}
	})
}
