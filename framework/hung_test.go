package framework_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// hangingHandler ignores its context: it returns only when the test ends.
// Its claims arrive on claimed; the cleanup that unblocks it is registered
// here, after newStore's leak check, so it runs first.
func hangingHandler(t *testing.T) (h leasework.HandlerFunc, claimed <-chan leasework.Claim, unblock func()) {
	ch, done := make(chan leasework.Claim, 16), make(chan struct{})
	var once sync.Once
	unblock = func() { once.Do(func() { close(done) }) }
	t.Cleanup(unblock)
	return func(ctx context.Context, c *leasework.Claim) error {
		ch <- *c
		<-done
		return errors.New("returned at last")
	}, ch, unblock
}

// expiredInDatabase reports whether row id's lease has expired by the
// database's clock.
func expiredInDatabase(t *testing.T, s *lease.Store, id int64) bool {
	t.Helper()
	var expired bool
	err := s.DB().QueryRowContext(context.Background(),
		`SELECT lease_until < clock_timestamp() FROM `+s.QualifiedTable()+` WHERE id = $1`, id).Scan(&expired)
	if err != nil {
		t.Fatal(err)
	}
	return expired
}

// A handler that ignores its context after its attempt timed out does not
// hold its row: its claim is no longer renewed, the lease expires, and
// another worker takes the event over, with the hung attempt counted.
//
// The scenario needs the attempt's timeout (50 ms after the handler
// starts) to end the handler's context while its lease is still held (its
// local deadline two seconds after the last confirmed renewal: with half a
// second, a CI machine running other packages' tests lost the lease first
// in five runs of five). A server
// too busy to confirm a renewal for that long, or one that answers a
// renewal sent before the timeout only after the lease ran out, makes the
// lease path win instead (counted as a lost lease, rightly): the scenario
// then runs again, up to five times, so that the verdict does not depend
// on the machine's speed.
func TestTimedOutHandlerIgnoringItsContextLosesItsRow(t *testing.T) {
	for try := 1; ; try++ {
		if timedOutHandlerLosesItsRow(t) {
			return
		}
		if try == 5 {
			t.Fatal("in five runs, the lease was lost before the attempt's timeout every time: the hung path was never reached")
		}
		t.Logf("run %d: the lease was lost first (not a hung handler); running again", try)
	}
}

// timedOutHandlerLosesItsRow runs the scenario once, and reports false when
// the lease was lost before the attempt's timeout.
func timedOutHandlerLosesItsRow(t *testing.T) bool {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	const leaseLen = 2 * time.Second
	a := newWorker(t, s, framework.Config{
		WorkerID: "a", Concurrency: 1, Lease: leaseLen, RenewEvery: 50 * time.Millisecond,
		AttemptTimeout: 50 * time.Millisecond, GracePeriod: -1, StopTimeout: framework.MinStopTimeout,
	})
	hang, claimedA, _ := hangingHandler(t)
	register(t, a, "k", framework.RetryPolicy{}, hang)
	start(t, a)
	if c := recv(t, claimedA, "a's claim"); c.Generation != 1 {
		t.Fatalf("a claimed generation %d; want 1", c.Generation)
	}
	// The property under test is that renewal stops: only the lease's own
	// end can show it.
	waitFor(t, "the lease to expire in the database", func() bool { return expiredInDatabase(t, s, id) })
	waitFor(t, "a to give the claim up, as hung or as lost", func() bool {
		k := a.Counters()
		return k.HungHandlers+k.LeasesLost > 0
	})
	if k := a.Counters(); k.LeasesLost > 0 {
		t.Logf("a's counters %+v", k)
		return false
	}

	b := newWorker(t, s, framework.Config{WorkerID: "b", PollInterval: 20 * time.Millisecond})
	claimedB := make(chan leasework.Claim, 1)
	register(t, b, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
		claimedB <- *c
		return nil
	})
	start(t, b)
	c := recv(t, claimedB, "b's claim")
	if c.Generation != 2 || c.Attempt != 2 || !c.Reclaimed {
		t.Errorf("b claimed generation %d attempt %d reclaimed %v; want 2, 2, true", c.Generation, c.Attempt, c.Reclaimed)
	}
	waitRow(t, s, id, "b's completion", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	if k := a.Counters(); k.HungHandlers != 1 || k.LocalLeaseTimeouts != 0 || k.LeasesLost != 0 {
		t.Errorf("a's counters %+v; want the hung handler counted as such, not as a lost lease", k)
	}
	return true
}

// A stop returns within GracePeriod + StopTimeout even when a handler
// ignores its context, and does not release that handler's claim: it is
// left to expire, and the next claim counts the attempt.
func TestStopIsBoundedByStopTimeout(t *testing.T) {
	for _, stopNow := range []bool{false, true} {
		name := "graceful"
		if stopNow {
			name = "StopNow"
		}
		t.Run(name, func(t *testing.T) {
			s := newStore(t, pgtest.Drivers[0].New())
			ctx := context.Background()
			id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
			cfg := framework.Config{GracePeriod: 20 * time.Millisecond, StopTimeout: 200 * time.Millisecond}
			if stopNow {
				cfg.GracePeriod = time.Hour
			}
			var logs syncBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			w := newWorker(t, s, cfg)
			hang, claimed, unblock := hangingHandler(t)
			register(t, w, "k", framework.RetryPolicy{}, hang)
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			recv(t, claimed, "the claim")
			cancel()
			if stopNow {
				w.StopNow()
			}
			if err := recv(t, done, "Run to return"); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if k := w.Counters(); k.HungHandlers != 1 || k.Released != 0 || k.OutcomesAbandoned != 0 {
				t.Errorf("counters %+v; want 1 hung handler, nothing released", k)
			}
			r, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != leasework.StatusInProgress || r.Generation != 1 || r.Attempt != 1 {
				t.Fatalf("row after the stop: %s generation %d attempt %d; want still INPROGRESS at 1, 1", r.Status, r.Generation, r.Attempt)
			}
			// The handler returns after Run did: nothing breaks, nothing is
			// written, the claim stays as it was.
			unblock()
			waitFor(t, "the late handler's return to be logged", func() bool {
				return strings.Contains(logs.String(), "handler returned after the worker stopped")
			})
			if r2, err := s.Get(ctx, id); err != nil || r2.Status != r.Status || r2.Generation != r.Generation || r2.LastError != "" {
				t.Fatalf("row after the late return = %+v, %v; want it untouched", r2, err)
			}
			if err := leasetest.ExpireLease(ctx, s, id); err != nil {
				t.Fatal(err)
			}
			claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "next"})
			if err != nil || len(claims) != 1 || claims[0].Generation != 2 || claims[0].Attempt != 2 {
				t.Fatalf("next claim = %+v, %v; want generation 2, attempt 2", claims, err)
			}
		})
	}
}
