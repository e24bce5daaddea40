package framework_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A graceful stop cancels handlers still running after the grace period with
// ErrShutdown and releases their claims: READY, no lease, the attempt given
// back. No goroutine outlives Run (newStore checks it).
func TestGracefulStopReleasesClaims(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k"}, lease.Event{Kind: "k"}, lease.Event{Kind: "k"})
		w := newWorker(t, s, framework.Config{GracePeriod: 10 * time.Millisecond})
		var started atomic.Int64
		causes := make(chan error, 3)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			started.Add(1)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
		stop := start(t, w)
		waitFor(t, "3 running handlers", func() bool { return started.Load() == 3 })
		stop()
		for range 3 {
			if cause := recv(t, causes, "a cancellation"); !errors.Is(cause, leasework.ErrShutdown) {
				t.Errorf("cause = %v; want ErrShutdown", cause)
			}
		}
		for _, e := range ids {
			r, err := s.Get(context.Background(), e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != leasework.StatusReady || r.LeaseUntil != nil || r.Attempt != 0 || r.Generation != 1 {
				t.Errorf("row %d: %s lease %v attempt %d generation %d; want READY, no lease, attempt 0, generation 1",
					r.ID, r.Status, r.LeaseUntil, r.Attempt, r.Generation)
			}
		}
		if c := w.Counters(); c.Released != 3 {
			t.Errorf("counters %+v; want 3 released", c)
		}
	})
}

// Handlers that finish within the grace period complete normally.
func TestGracePeriodLetsHandlersFinish(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	w := newWorker(t, s, framework.Config{GracePeriod: time.Hour})
	running := make(chan struct{})
	finish := make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		close(running)
		<-finish
		if ctx.Err() != nil {
			return errors.New("cancelled within the grace period")
		}
		return nil
	})
	stop := start(t, w)
	recv(t, running, "the handler")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned while a handler was running within its grace period")
	case <-time.After(20 * time.Millisecond):
	}
	close(finish)
	recv(t, stopped, "Run to return")
	if r, err := s.Get(context.Background(), id); err != nil || r.Status != leasework.StatusDone {
		t.Fatalf("row = %+v, %v; want DONE", r, err)
	}
}

// StopNow cuts the grace period short.
func TestStopNowCancelsAtOnce(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	w := newWorker(t, s, framework.Config{GracePeriod: time.Hour})
	running := make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		close(running)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	stop := start(t, w)
	recv(t, running, "the handler")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }() // a graceful stop, with an hour of grace
	w.StopNow()
	recv(t, stopped, "Run to return after StopNow")
	if r, err := s.Get(context.Background(), id); err != nil || r.Status != leasework.StatusReady {
		t.Fatalf("row = %+v, %v; want READY", r, err)
	}
}
