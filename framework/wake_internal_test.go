package framework

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An idle claim loop reads the leases of its next wake from the earliest
// running one it found last time (lease.Store.NextWakeFrom), and from now
// again once none runs: the claim's lease is kept as the floor, and after
// its completion the loop waits its whole poll with no floor left.
func TestNextWakeReadsFromTheLeaseItFound(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	pgtest.EnqueueN(t, s, 1, "k")
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Hour})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %d claims, %v", len(claims), err)
	}
	w, err := New(s.DB(), s.Driver(), Config{Schema: s.Schema(), Table: s.Table(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.dbCtx = ctx
	q := w.queues[0]
	for range 2 {
		if wait := w.untilNextWake(q, 2*time.Hour); wait < 59*time.Minute || wait > time.Hour+time.Second {
			t.Fatalf("wait %v with a lease of an hour running; want about an hour", wait)
		}
		if !q.wakeFrom.Equal(claims[0].LeaseUntil) {
			t.Fatalf("floor of the next wake %v; want the running lease, %v", q.wakeFrom, claims[0].LeaseUntil)
		}
	}
	if _, err := s.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
		t.Fatal(err)
	}
	if wait := w.untilNextWake(q, 2*time.Hour); wait != 2*time.Hour || !q.wakeFrom.IsZero() {
		t.Fatalf("with nothing running: wait %v, floor %v; want the poll's 2h and no floor", wait, q.wakeFrom)
	}
}
