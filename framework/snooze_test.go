package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

// A snoozed attempt is not a failure: the event goes back to READY after
// the delay with its last error kept, and its budget grows by one, so an
// event with a budget of one attempt still runs again.
func TestSnoozeRunsAgainWithoutSpendingTheBudget(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		attempts := make(chan int, 4)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			attempts <- c.Attempt
			if c.Attempt == 1 {
				return leasework.Snooze(time.Hour)
			}
			return nil
		})
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: 1})[0]
		stop := start(t, w)
		if got := recv(t, attempts, "the first attempt"); got != 1 {
			t.Fatalf("attempt %d; want 1", got)
		}
		r := waitRow(t, s, e.ID, "the snooze", func(r lease.Row) bool { return r.Status == leasework.StatusReady })
		if r.MaxAttempts != 2 || r.LastError != "" || r.NextAttemptAt.Sub(r.UpdatedAt) < 59*time.Minute {
			t.Fatalf("row after snooze: %+v; want READY in an hour, budget 2, no last error", r)
		}
		if err := leasetest.MakeDue(ctx, s, e.ID); err != nil { // the hour, as a fixture
			t.Fatal(err)
		}
		if got := recv(t, attempts, "the attempt after the snooze"); got != 2 {
			t.Fatalf("attempt %d; want 2", got)
		}
		waitRow(t, s, e.ID, "completion", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		stop()
		if c := w.Counters(); c.Snoozed != 1 || c.Retried != 0 || c.Failed != 0 || c.Completed != 1 {
			t.Errorf("counters %+v; want 1 snoozed, 1 completed, no retry or failure", c)
		}
	})
}

// RetryAfter sets the delay of the retry, whatever the policy's backoff;
// the attempt is a failure, recorded with its error.
func TestRetryAfterChoosesTheDelay(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, c *leasework.Claim) error {
			return leasework.RetryAfter(errors.New("rate limited"), 10*time.Minute)
		})
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0]
		stop := start(t, w)
		r := waitRow(t, s, e.ID, "the retry", func(r lease.Row) bool { return r.Status == leasework.StatusReady && r.Attempt == 1 })
		stop()
		if d := r.NextAttemptAt.Sub(r.UpdatedAt); d < 9*time.Minute || d > 11*time.Minute || r.LastError != "rate limited" {
			t.Errorf("row after RetryAfter: next attempt in %v, last error %q; want about 10m, \"rate limited\"", d, r.LastError)
		}
		if c := w.Counters(); c.Retried != 1 || c.Snoozed != 0 {
			t.Errorf("counters %+v; want 1 retried", c)
		}
	})
}
