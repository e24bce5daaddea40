package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

// A snooze is written under the guard: a stale owner's is rejected, the
// owner's grows the budget by one and keeps the row READY on its last
// allowed attempt, and written again it is found already recorded.
func TestSnoozeIsGuarded(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: 1})[0]
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		stale := claims[0].Ref()
		newer, err := leasetest.NewerGeneration(ctx, s, e.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		snooze := func(ref leasework.Ref) lease.Result {
			res, err := s.RetryMany(ctx, []lease.RetryRequest{{Ref: ref, Delay: time.Hour, Snooze: true}})
			if err != nil || len(res) != 1 {
				t.Fatalf("snooze: %v, %v", res, err)
			}
			return res[0]
		}
		if r := snooze(stale); !errors.Is(r.Err, leasework.ErrLeaseLost) {
			t.Errorf("a stale owner's snooze: %+v; want ErrLeaseLost", r)
		}
		if r := snooze(newer); r.Err != nil || r.Status != leasework.StatusReady {
			t.Fatalf("the owner's snooze: %+v; want READY", r)
		}
		row, err := s.Get(ctx, e.ID)
		if err != nil || row.Status != leasework.StatusReady || row.MaxAttempts != 2 || row.Generation != newer.Generation {
			t.Fatalf("row after snooze: %+v, %v; want READY with a budget of 2 at generation %d", row, err, newer.Generation)
		}
		if r := snooze(newer); r.Err != nil || !r.AlreadyRecorded {
			t.Errorf("the same snooze again: %+v; want AlreadyRecorded", r)
		}
	})
}
