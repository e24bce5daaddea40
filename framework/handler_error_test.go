package framework_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// nilErr is an error type whose methods dereference their receiver, as most
// do: a nil *nilErr returned as an error panics when read.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// panicErr is a non-nil error whose Error method panics.
type panicErr struct{}

func (panicErr) Error() string { panic("Error of panicErr") }

// A handler that returns a nil pointer as a non-nil error (the typed-nil
// mistake), or an error whose methods panic, does not break the worker: the
// attempt is recorded as a retry whose text says what the handler did, the
// handler's slot is freed (with one slot, every later event depends on it),
// later events are still handled, and the worker stops cleanly.
func TestHandlerErrorsThatPanicWhenReadAreRetried(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	var events []lease.Event
	for i := range 4 {
		events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprint("typed-nil-", i)})
	}
	events = append(events, lease.Event{Kind: "k", EventID: "panics-when-read"})
	ids := pgtest.Enqueue(t, s, events...)
	w := newWorker(t, s, framework.Config{Concurrency: 1, PollInterval: 20 * time.Millisecond})
	var mu sync.Mutex
	lastErrors := map[string]string{} // what attempt 2 saw of attempt 1
	register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(_ context.Context, c *leasework.Claim) error {
		if c.Attempt == 1 && c.EventID == "panics-when-read" {
			return panicErr{}
		}
		if c.Attempt == 1 && strings.HasPrefix(c.EventID, "typed-nil-") {
			var e *nilErr
			return e
		}
		mu.Lock()
		lastErrors[c.EventID] = c.LastError
		mu.Unlock()
		return nil
	})
	stop := start(t, w)
	for _, e := range ids {
		r := waitRow(t, s, e.ID, "the event to complete", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		if r.Attempt != 2 || r.Generation != 2 {
			t.Errorf("row %d: attempt %d generation %d; want both 2 (one retry)", r.ID, r.Attempt, r.Generation)
		}
	}
	late := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "late"})[0]
	waitRow(t, s, late.ID, "an event enqueued afterwards to complete", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	stop()

	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		got := lastErrors[e.EventID]
		want := "the handler returned a nil *framework_test.nilErr as a non-nil error"
		if e.EventID == "panics-when-read" {
			want = "panicked when read: Error of panicErr"
		}
		if !strings.Contains(got, want) {
			t.Errorf("event %s: attempt 1 recorded %q; want it to contain %q", e.EventID, got, want)
		}
	}
	if c := w.Counters(); c.Retried != 5 || c.Completed != 6 || c.StaleRejections != 0 || c.OutcomesAbandoned != 0 {
		t.Errorf("counters %+v; want 5 retried, 6 completed", c)
	}
}
