package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

// NextExpiry reads the earliest lease still running: none when nothing is
// INPROGRESS, about the claim's lease when one is, and none once that lease
// ran out (an expired lease is the claim's to find, not a time to wait for).
func TestNextExpiry(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		next := func() (time.Duration, bool) {
			t.Helper()
			d, ok, err := s.NextExpiry(ctx, "")
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
