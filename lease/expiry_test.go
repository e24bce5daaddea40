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

// NextExpiry reads the earliest lease among other workers' claims of the
// kinds asked for: none when nothing is INPROGRESS, about the claim's lease
// when one is, none for a kind not asked for or for the excluded worker's
// own claims, and zero for a lease that ran out already.
func TestNextExpiry(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		next := func(kinds []string, except string) (time.Duration, bool) {
			t.Helper()
			d, ok, err := s.NextExpiry(ctx, kinds, except)
			if err != nil {
				t.Fatal(err)
			}
			return d, ok
		}
		if d, ok := next(nil, ""); ok {
			t.Fatalf("empty table: next expiry %v; want none", d)
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "a"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Hour, Worker: "w1"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v, %v", claims, err)
		}
		if d, ok := next(nil, ""); !ok || d <= 59*time.Minute || d > time.Hour {
			t.Errorf("one claim with an hour's lease: next expiry %v, %v; want about an hour", d, ok)
		}
		if d, ok := next([]string{"a"}, "w2"); !ok || d <= 59*time.Minute {
			t.Errorf("kind a, excluding another worker: next expiry %v, %v; want about an hour", d, ok)
		}
		if d, ok := next([]string{"b"}, ""); ok {
			t.Errorf("kind b: next expiry %v; want none", d)
		}
		if d, ok := next(nil, "w1"); ok {
			t.Errorf("excluding the owner: next expiry %v; want none", d)
		}
		if err := leasetest.ExpireLease(ctx, s, claims[0].ID); err != nil {
			t.Fatal(err)
		}
		if d, ok := next(nil, ""); !ok || d != 0 {
			t.Errorf("an expired lease: next expiry %v, %v; want zero", d, ok)
		}
	})
}
