package framework_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Progress recorded by attempt 1 is in the claim of attempt 2, whether
// attempt 1 failed or lost its lease.
func TestProgressReachesNextAttempt(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "fails"}, lease.Event{Kind: "k", EventID: "loses"})
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond, RenewEvery: 20 * time.Millisecond})
		lostOne := make(chan struct{})
		second := make(chan leasework.Claim, 2)
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, c *leasework.Claim) error {
			if c.Attempt > 1 {
				second <- *c
				return nil
			}
			if c.Progress != nil {
				return leasework.Permanent(errors.New("first attempt got progress"))
			}
			if err := framework.RecordProgress(ctx, []byte("page-1")); err != nil {
				return leasework.Permanent(err)
			}
			if err := framework.RecordProgress(ctx, []byte("page-2 of "+c.EventID)); err != nil {
				return leasework.Permanent(err)
			}
			if c.EventID == "fails" {
				return errors.New("crashed halfway")
			}
			close(lostOne)
			<-ctx.Done()
			// Past the lease, progress is refused.
			if err := framework.RecordProgress(ctx, []byte("page-3")); !errors.Is(err, leasework.ErrLeaseLost) {
				return leasework.Permanent(errors.New("progress accepted after the lease was lost"))
			}
			return ctx.Err()
		})
		start(t, w)
		recv(t, lostOne, "the second event's first attempt")
		if err := leasetest.ExpireLease(ctx, s, ids[1].ID); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			c := recv(t, second, "a second attempt")
			if want := "page-2 of " + c.EventID; !bytes.Equal(c.Progress, []byte(want)) {
				t.Errorf("event %s attempt %d: progress %q; want %q", c.EventID, c.Attempt, c.Progress, want)
			}
		}
	})
}

func TestProgressTooLarge(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	w := newWorker(t, s, framework.Config{})
	errs := make(chan error, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		errs <- framework.RecordProgress(ctx, make([]byte, framework.MaxProgressSize+1))
		return nil
	})
	start(t, w)
	if err := recv(t, errs, "RecordProgress"); !errors.Is(err, framework.ErrProgressTooLarge) {
		t.Fatalf("RecordProgress(64 KiB + 1) = %v; want ErrProgressTooLarge", err)
	}
}
