package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// NextWake reads the earliest lease still running: none when nothing is
// INPROGRESS, about the claim's lease when one is, and none once that lease
// ran out (an expired lease is the claim's to find, not a time to wait for).
func TestNextWake(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		next := func() (time.Duration, bool) {
			t.Helper()
			d, ok, err := s.NextWake(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			return d, ok
		}
		if d, ok := next(); ok {
			t.Fatalf("empty table: next expiry %v; want none", d)
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "a"}, lease.Event{Kind: "b"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Hour, Kinds: []string{"a"}})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v, %v", claims, err)
		}
		if _, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: 2 * time.Hour, Kinds: []string{"b"}}); err != nil {
			t.Fatal(err)
		}
		if d, ok := next(); !ok || d <= 59*time.Minute || d > time.Hour {
			t.Errorf("leases of an hour and two: next expiry %v, %v; want about an hour", d, ok)
		}
		if err := leasetest.ExpireLease(ctx, s, claims[0].ID); err != nil {
			t.Fatal(err)
		}
		if d, ok := next(); !ok || d <= 119*time.Minute || d > 2*time.Hour {
			t.Errorf("the hour's lease expired: next expiry %v, %v; want the other, about two hours", d, ok)
		}
	})
}

// NextWake reads the earliest READY row not yet due too: a retry's delay,
// an event enqueued to run later, in any priority level; whichever of it
// and the earliest lease comes first. A row already due is the claim's.
func TestNextWakeReadsRowsComingDue(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		next := func() (time.Duration, bool) {
			t.Helper()
			d, ok, err := s.NextWake(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			return d, ok
		}
		// Due now, and in another queue later: nothing ahead in this one.
		pgtest.Enqueue(t, s, lease.Event{Kind: "due"}, lease.Event{Kind: "elsewhere", Queue: "other", RunAt: time.Now().Add(time.Minute)})
		if d, ok := next(); ok {
			t.Fatalf("a row due now and one of another queue: next wake %v; want none", d)
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "later", Priority: 7, RunAt: time.Now().Add(3 * time.Hour)})
		if d, ok := next(); !ok || d <= 179*time.Minute || d > 3*time.Hour {
			t.Errorf("a row due in three hours at priority 7: next wake %v, %v; want about three hours", d, ok)
		}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: 2 * time.Hour, Kinds: []string{"due"}})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v, %v", claims, err)
		}
		if d, ok := next(); !ok || d <= 119*time.Minute || d > 2*time.Hour {
			t.Errorf("a lease of two hours: next wake %v, %v; want about two hours", d, ok)
		}
		if _, err := s.Write(ctx, lease.Retry(claims[0].Ref(), time.Hour, "once")); err != nil {
			t.Fatal(err)
		}
		if d, ok := next(); !ok || d <= 59*time.Minute || d > time.Hour {
			t.Errorf("a retry in an hour: next wake %v, %v; want about an hour", d, ok)
		}
	})
}
