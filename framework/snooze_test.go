package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
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

// Snoozes are not failures for the kind's retry policy: a kind whose policy
// allows 3 attempts, whose handler snoozes three times and then fails, is
// retried after the policy's first delay, InitialInterval, then after its
// second, and ends FAILED on its third failure, the policy's cap.
func TestSnoozesDoNotSpendTheRetryPolicy(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		claims := make(chan leasework.Claim, 8)
		policy := framework.RetryPolicy{InitialInterval: time.Hour, Multiplier: 2, RandomizationFactor: -1, MaxAttempts: 3}
		register(t, w, "k", policy, func(ctx context.Context, c *leasework.Claim) error {
			claims <- *c
			if c.Attempt <= 3 {
				return leasework.Snooze(0)
			}
			return errors.New("down")
		})
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0]
		stop := start(t, w)
		settled := func(attempt int) lease.Row {
			t.Helper()
			return waitRow(t, s, e.ID, fmt.Sprintf("the outcome of attempt %d", attempt), func(r lease.Row) bool {
				return r.Attempt == attempt && r.Status != leasework.StatusInProgress
			})
		}
		for i, want := range []time.Duration{time.Hour, 2 * time.Hour} {
			attempt := 4 + i
			r := settled(attempt)
			if r.Status != leasework.StatusReady {
				t.Fatalf("after 3 snoozes and %d failure(s), attempt %d: %s, %q; want READY: the policy allows 3 failures",
					i+1, attempt, r.Status, r.LastError)
			}
			if got := r.NextAttemptAt.Sub(r.UpdatedAt); got != want || r.LastError != "down" {
				t.Errorf("retry after failure %d: next attempt in %v, last error %q; want %v (failure %d of the policy's schedule), \"down\"",
					i+1, got, r.LastError, want, i+1)
			}
			if err := leasetest.MakeDue(ctx, s, e.ID); err != nil { // the delay, as a fixture
				t.Fatal(err)
			}
		}
		r := settled(6)
		if r.Status != leasework.StatusFailed || !strings.Contains(r.LastError, "retry policy's 3") {
			t.Fatalf("third failure: %s, %q; want FAILED by the retry policy's cap", r.Status, r.LastError)
		}
		stop()
		for attempt := 1; attempt <= 6; attempt++ {
			c := recv(t, claims, fmt.Sprintf("the claim of attempt %d", attempt))
			snoozes := min(attempt-1, 3)
			if c.Attempt != attempt || c.Snoozes != snoozes || c.Failures() != attempt-1-snoozes {
				t.Errorf("claim %d: Attempt %d, Snoozes %d, Failures() %d; want %d, %d, %d",
					attempt, c.Attempt, c.Snoozes, c.Failures(), attempt, snoozes, attempt-1-snoozes)
			}
		}
		if c := w.Counters(); c.Snoozed != 3 || c.Retried != 2 || c.Failed != 1 {
			t.Errorf("counters %+v; want 3 snoozed, 2 retried, 1 failed", c)
		}
	})
}

// Snoozes do not grow the policy's backoff: the first failure after n
// snoozes waits InitialInterval, not InitialInterval × Multiplier^n.
func TestSnoozesDoNotGrowTheBackoff(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		policy := framework.RetryPolicy{InitialInterval: time.Minute, Multiplier: 3, RandomizationFactor: -1}
		register(t, w, "k", policy, func(ctx context.Context, c *leasework.Claim) error {
			if c.Attempt <= 2 {
				return leasework.Snooze(0)
			}
			return errors.New("down")
		})
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0]
		stop := start(t, w)
		r := waitRow(t, s, e.ID, "the retry after two snoozes", func(r lease.Row) bool {
			return r.Attempt == 3 && r.Status != leasework.StatusInProgress
		})
		stop()
		if got := r.NextAttemptAt.Sub(r.UpdatedAt); r.Status != leasework.StatusReady || got != time.Minute {
			t.Errorf("first failure after two snoozes: %s, next attempt in %v; want READY in 1m, the policy's InitialInterval", r.Status, got)
		}
	})
}
