package framework_test

import (
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

// A handler whose row is claimed again by another worker, after its lease
// expired, has its context cancelled with ErrLeaseLost, and the completion it
// returns late is rejected, counted and changes nothing.
func TestReclaimedRowCancelsHandlerAndRejectsLateCompletion(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		row := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e"})[0]

		// a runs one handler at a time, and its handler holds its slot until
		// b has claimed, so that a cannot reclaim the row itself.
		a := newWorker(t, s, framework.Config{WorkerID: "a", Concurrency: 1, RenewEvery: 20 * time.Millisecond})
		claimedA := make(chan leasework.Claim, 1)
		causeA := make(chan error, 1)
		bClaimed := make(chan struct{})
		register(t, a, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			claimedA <- *c
			<-ctx.Done()
			causeA <- context.Cause(ctx)
			<-bClaimed
			return nil // a late "done"
		})
		start(t, a)
		if c := recv(t, claimedA, "worker a's claim"); c.Generation != 1 {
			t.Fatalf("a claimed generation %d; want 1", c.Generation)
		}

		if err := leasetest.ExpireLease(ctx, s, row.ID); err != nil {
			t.Fatal(err)
		}
		b := newWorker(t, s, framework.Config{WorkerID: "b"})
		claimedB := make(chan leasework.Claim, 1)
		release := make(chan struct{})
		register(t, b, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			claimedB <- *c
			<-release
			return nil
		})
		start(t, b)
		c := recv(t, claimedB, "worker b's claim")
		close(bClaimed)
		if c.Generation != 2 || !c.Reclaimed {
			t.Fatalf("b claimed generation %d, reclaimed %v; want 2, true", c.Generation, c.Reclaimed)
		}

		if cause := recv(t, causeA, "a's cancellation"); !errors.Is(cause, leasework.ErrLeaseLost) ||
			errors.Is(cause, leasework.ErrLeaseUnconfirmed) || errors.Is(cause, leasework.ErrCancelled) {
			t.Fatalf("a's context cause = %v; want ErrLeaseLost: the database rejected its renewal", cause)
		}
		waitFor(t, "a's late completion to be rejected", func() bool { return a.Counters().StaleRejections == 1 })
		if c := a.Counters(); c.Completed != 0 || c.LeasesLost != 1 {
			t.Errorf("a's counters %+v; want 0 completed, 1 lease lost", c)
		}
		r, err := s.Get(ctx, row.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != leasework.StatusInProgress || r.Generation != 2 || r.Worker != "b" {
			t.Fatalf("row after a's late completion: %s generation %d worker %q; want b's live claim", r.Status, r.Generation, r.Worker)
		}

		close(release)
		waitFor(t, "b's completion", func() bool { return b.Counters().Completed == 1 })
		if r, err := s.Get(ctx, row.ID); err != nil || r.Status != leasework.StatusDone || r.Generation != 2 || b.Counters().Reclaimed != 1 {
			t.Errorf("row %+v, %v, b's counters %+v; want DONE at generation 2, 1 reclaimed", r, err, b.Counters())
		}
	})
}

// When the database cannot be reached, a worker cancels its handler on its
// own before its lease can have expired, and gives up the outcome it cannot
// write.
func TestUnreachableDatabaseCancelsBeforeLeaseDeadline(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	s := newStore(t, drv)
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	db := pgtest.Open(t, drv) // the worker's own pool, closed under it
	const leaseLen = 2 * time.Second
	w, err := framework.New(db, drv, framework.Config{
		Schema: s.Schema(), Table: s.Table(), Retention: -1,
		Lease: leaseLen, RenewEvery: 100 * time.Millisecond, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		started, cancelled time.Time
		cause              error
	}
	claimed := make(chan struct{})
	done := make(chan result, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		r := result{started: time.Now()}
		close(claimed)
		<-ctx.Done()
		r.cancelled, r.cause = time.Now(), context.Cause(ctx)
		done <- r
		return ctx.Err()
	})
	start(t, w)
	recv(t, claimed, "the claim")
	db.Close() // from now on, every statement of the worker fails

	r := recv(t, done, "the handler's cancellation")
	if !errors.Is(r.cause, leasework.ErrLeaseUnconfirmed) || !errors.Is(r.cause, leasework.ErrLeaseLost) {
		t.Fatalf("cause = %v; want ErrLeaseUnconfirmed, which matches ErrLeaseLost too", r.cause)
	}
	// The claim statement was sent before the handler started, so its lease
	// ends after started+leaseLen at the earliest.
	if !r.cancelled.Before(r.started.Add(leaseLen)) {
		t.Errorf("cancelled %v after the handler started; want before the lease of %v ends", r.cancelled.Sub(r.started), leaseLen)
	}
	waitFor(t, "the outcome to be abandoned", func() bool { return w.Counters().OutcomesAbandoned == 1 })
	if c := w.Counters(); c.LocalLeaseTimeouts != 1 || c.LeasesLost != 1 || c.Retried != 0 {
		t.Errorf("counters %+v; want 1 local lease timeout, 1 lease lost, no retry", c)
	}
}

// With RenewEvery at its maximum, Lease/2, a handler running for several
// leases keeps its claim: no renewal is late enough for the watchdog to
// give the claim up.
func TestLongHandlerKeepsItsLeaseAtLongestRenewEvery(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	const leaseLen = 2 * time.Second
	w := newWorker(t, s, framework.Config{Lease: leaseLen, RenewEvery: leaseLen / 2})
	running, finish := make(chan struct{}), make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		close(running)
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	start(t, w)
	recv(t, running, "the handler")
	seen := map[time.Time]bool{}
	waitFor(t, "four renewals", func() bool {
		r, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != leasework.StatusInProgress {
			t.Fatalf("row %s while its handler runs", r.Status)
		}
		seen[*r.LeaseUntil] = true
		return len(seen) >= 5 // the claim's lease and four renewals
	})
	close(finish)
	waitRow(t, s, id, "completion", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	// The row is DONE once the outcome commits; the worker counts it after.
	waitFor(t, "the completion to be counted", func() bool { return w.Counters().Completed == 1 })
	if c := w.Counters(); c.LocalLeaseTimeouts != 0 || c.LeasesLost != 0 || c.Completed != 1 {
		t.Errorf("counters %+v; want the claim kept and completed", c)
	}
}
