package framework_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Retries are scheduled by the kind's policy: the database's next_attempt_at
// is the retry statement's time plus exactly the policy's delay, and the row
// ends FAILED on its last allowed attempt.
func TestRetriesSpacedByPolicy(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: 4})[0].ID
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		policy := framework.RetryPolicy{
			InitialInterval:     time.Hour,
			Multiplier:          3,
			MaxInterval:         5 * time.Hour,
			RandomizationFactor: -1, // an exact schedule
		}
		register(t, w, "k", policy, func(_ context.Context, c *leasework.Claim) error {
			return errors.New("broker unavailable")
		})
		start(t, w)

		// After attempt n, the row waits InitialInterval × 3^(n-1), capped.
		wants := []time.Duration{time.Hour, 3 * time.Hour, 5 * time.Hour}
		for i, want := range wants {
			attempt := i + 1
			r := waitRow(t, s, id, "a scheduled retry", func(r lease.Row) bool {
				return r.Status == leasework.StatusReady && r.Attempt == attempt
			})
			// Both are the retry statement's statement_timestamp() (+ delay).
			if got := r.NextAttemptAt.Sub(r.UpdatedAt); got != want {
				t.Errorf("after attempt %d: next attempt in %v; want %v", attempt, got, want)
			}
			if r.LastError != "broker unavailable" {
				t.Errorf("after attempt %d: last error %q", attempt, r.LastError)
			}
			if err := leasetest.MakeDue(ctx, s, id); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the last attempt to fail the row", func() bool { return w.Counters().Failed == 1 })
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != leasework.StatusFailed || r.Attempt != 4 || r.Generation != 4 || r.LastError != "broker unavailable" {
			t.Errorf("row: %s attempt %d generation %d error %q; want FAILED at attempt and generation 4", r.Status, r.Attempt, r.Generation, r.LastError)
		}
		if c := w.Counters(); c.Retried != 3 || c.Failed != 1 {
			t.Errorf("counters %+v; want 3 retried, 1 failed", c)
		}
	})
}

func TestPermanentErrorAndPolicyBudgetFail(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "permanent"}, lease.Event{Kind: "capped"})
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	register(t, w, "permanent", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		return leasework.Permanent(errors.New("malformed payload"))
	})
	fast := framework.RetryPolicy{InitialInterval: time.Millisecond, MaxAttempts: 2}
	register(t, w, "capped", fast, func(context.Context, *leasework.Claim) error {
		return errors.New("still down")
	})
	start(t, w)
	failed := func(r lease.Row) bool { return r.Status == leasework.StatusFailed }
	if r := waitRow(t, s, ids[0].ID, "the permanent failure", failed); r.Attempt != 1 || r.LastError != "malformed payload" {
		t.Errorf("permanent: attempt %d, error %q; want attempt 1, the error's text", r.Attempt, r.LastError)
	}
	r := waitRow(t, s, ids[1].ID, "the capped failure", failed)
	if r.Attempt != 2 || !strings.Contains(r.LastError, "still down") || !strings.Contains(r.LastError, "retry policy") {
		t.Errorf("capped: attempt %d, error %q; want attempt 2 and the policy named", r.Attempt, r.LastError)
	}
}

func TestPanicIsRecordedAndRetried(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	second := make(chan leasework.Claim, 1)
	register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(_ context.Context, c *leasework.Claim) error {
		if c.Attempt == 1 {
			panic("nil map in handler")
		}
		second <- *c
		return nil
	})
	start(t, w)
	c := recv(t, second, "the attempt after the panic")
	if !strings.Contains(c.LastError, "nil map in handler") || !strings.Contains(c.LastError, "goroutine") {
		t.Errorf("last error %q; want the panic value and its stack", c.LastError)
	}
	waitRow(t, s, id, "completion", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	if n := w.Counters().Panics; n != 1 {
		t.Errorf("%d panics counted; want 1", n)
	}
}

func TestAttemptTimeout(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	w := newWorker(t, s, framework.Config{AttemptTimeout: 50 * time.Millisecond})
	cause := make(chan error, 1)
	register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Hour}, func(ctx context.Context, c *leasework.Claim) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	start(t, w)
	if err := recv(t, cause, "the timeout"); !errors.Is(err, leasework.ErrAttemptTimeout) {
		t.Fatalf("cause = %v; want ErrAttemptTimeout", err)
	}
	r := waitRow(t, s, id, "the retry", func(r lease.Row) bool { return r.Status == leasework.StatusReady })
	if !strings.Contains(r.LastError, leasework.ErrAttemptTimeout.Error()) {
		t.Errorf("last error %q; want it to name the timeout", r.LastError)
	}
}

// A retry policy whose delays could overflow is refused at Register with an
// error naming the field, and a sane kind registered beside it runs its
// failures and retries as usual.
func TestRegisterRefusesOverflowingPolicy(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	fail := func(context.Context, *leasework.Claim) error { return errors.New("down") }
	for _, c := range []struct {
		policy framework.RetryPolicy
		want   string
	}{
		{framework.RetryPolicy{InitialInterval: math.MaxInt64 / 2}, "RetryPolicy.InitialInterval"},
		{framework.RetryPolicy{InitialInterval: 31 * 24 * time.Hour}, "RetryPolicy.InitialInterval"},
		{framework.RetryPolicy{MaxInterval: math.MaxInt64}, "RetryPolicy.MaxInterval"},
		{framework.RetryPolicy{Multiplier: math.NaN()}, "RetryPolicy.Multiplier is NaN"},
		{framework.RetryPolicy{Multiplier: math.Inf(1)}, "RetryPolicy.Multiplier is +Inf"},
		{framework.RetryPolicy{Multiplier: 1e6}, "RetryPolicy.Multiplier"},
		{framework.RetryPolicy{RandomizationFactor: math.NaN()}, "RetryPolicy.RandomizationFactor is NaN"},
		{framework.RetryPolicy{RandomizationFactor: math.Inf(-1)}, "RetryPolicy.RandomizationFactor is -Inf"},
	} {
		err := w.Register("overflowing", leasework.HandlerFunc(fail), c.policy)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register(%+v) = %v; want an error containing %q", c.policy, err, c.want)
		}
	}

	var events []lease.Event
	for i := range 20 {
		events = append(events, lease.Event{Kind: "sane", EventID: fmt.Sprint("sane-", i)}, lease.Event{Kind: "overflowing", EventID: fmt.Sprint("overflowing-", i)})
	}
	pgtest.Enqueue(t, s, events...)
	register(t, w, "sane", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(_ context.Context, c *leasework.Claim) error {
		if c.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	start(t, w)
	waitFor(t, "every sane event to complete", func() bool { return w.Counters().Completed == 20 })
	if c := w.Counters(); c.Retried != 20 || c.OutcomesAbandoned != 0 {
		t.Errorf("counters %+v; want 20 retried, 20 completed", c)
	}
	st, err := w.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[leasework.StatusDone] != 20 || st.Rows[leasework.StatusReady] != 20 || st.Rows[leasework.StatusInProgress] != 0 {
		t.Errorf("stats %+v; want the 20 sane events DONE and the 20 others untouched", st)
	}
}
