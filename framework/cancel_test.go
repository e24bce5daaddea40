package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An event cancelled while its handler runs: the handler's context ends
// with cause ErrCancelled (which also matches ErrLeaseLost), its late
// outcome is rejected, and the event stays DISCARDED.
func TestCancelledEventCancelsItsHandler(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{Lease: 3 * time.Second, RenewEvery: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond})
		claimed := make(chan leasework.Claim, 1)
		cause := make(chan error, 1)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			claimed <- *c
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil // a late "done"
		})
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e"})[0]
		stop := start(t, w)
		recv(t, claimed, "the claim")
		if _, err := s.Cancel(ctx, e.ID, "not needed"); err != nil {
			t.Fatal(err)
		}
		got := recv(t, cause, "the handler's cancellation")
		if !errors.Is(got, leasework.ErrCancelled) || !errors.Is(got, leasework.ErrLeaseLost) || errors.Is(got, leasework.ErrLeaseUnconfirmed) {
			t.Fatalf("cause = %v; want ErrCancelled (matching ErrLeaseLost)", got)
		}
		waitFor(t, "the late completion to be rejected", func() bool { return w.Counters().StaleRejections == 1 })
		stop()
		if c := w.Counters(); c.Cancelled != 1 || c.LeasesLost != 1 || c.Completed != 0 {
			t.Errorf("counters %+v; want 1 cancelled, 1 lease lost, nothing completed", c)
		}
		r, err := s.Get(ctx, e.ID)
		if err != nil || r.Status != leasework.StatusDiscarded || r.LastError != "cancelled: not needed" {
			t.Errorf("row: %+v, %v; want DISCARDED, cancelled", r, err)
		}
	})
}
