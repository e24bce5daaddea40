package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
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
			res, err := s.WriteMany(ctx, lease.Snooze(ref, time.Hour, ""))
			if err != nil || len(res) != 1 {
				t.Fatalf("snooze: %v, %v", res, err)
			}
			return res[0]
		}
		if r := snooze(stale); r.Verdict != lease.VerdictLost || !errors.Is(r.Err, leasework.ErrLeaseLost) {
			t.Errorf("a stale owner's snooze: %+v; want lost (ErrLeaseLost)", r)
		}
		if r := snooze(newer); r.Verdict != lease.VerdictAccepted || r.Err != nil || r.Status != leasework.StatusReady {
			t.Fatalf("the owner's snooze: %+v; want READY", r)
		}
		row, err := s.Get(ctx, e.ID)
		if err != nil || row.Status != leasework.StatusReady || row.MaxAttempts != 2 || row.Generation != newer.Generation {
			t.Fatalf("row after snooze: %+v, %v; want READY with a budget of 2 at generation %d", row, err, newer.Generation)
		}
		if r := snooze(newer); r.Err != nil || r.Verdict != lease.VerdictRecorded {
			t.Errorf("the same snooze again: %+v; want recorded already", r)
		}
	})
}

// A snooze is counted in the row and handed to the next claim, apart from
// failures; it adds one claim to the budget and a crash adds none, so
// failures and crashes spend the budget exactly as without the snooze
// (invariant 5), on both ways a budget ends: a retry on the last allowed
// attempt, and a lease that runs out on it. A requeue that resets the
// attempts resets the snoozes and takes back what they added.
func TestSnoozesCountedApartFromFailuresAndCrashes(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: 2})[0]
		claim := func(what string, attempt, snoozes, maxAttempts int, reclaimed bool) leasework.Claim {
			t.Helper()
			claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatalf("%s: claim = %+v, %v; want one claim", what, claims, err)
			}
			c := claims[0]
			if c.ID != e.ID || c.Attempt != attempt || c.Snoozes != snoozes || c.Failures() != attempt-1-snoozes ||
				c.MaxAttempts != maxAttempts || c.Reclaimed != reclaimed {
				t.Fatalf("%s: attempt %d, snoozes %d, failures %d, budget %d, reclaimed %v; want %d, %d, %d, %d, %v",
					what, c.Attempt, c.Snoozes, c.Failures(), c.MaxAttempts, c.Reclaimed,
					attempt, snoozes, attempt-1-snoozes, maxAttempts, reclaimed)
			}
			return c
		}
		retry := func(what string, c leasework.Claim, snooze bool) lease.Result {
			t.Helper()
			w := lease.Retry(c.Ref(), 0, "down")
			if snooze {
				w = lease.Snooze(c.Ref(), 0, "down")
			}
			res, err := s.WriteMany(ctx, w)
			if err != nil || len(res) != 1 || res[0].Err != nil {
				t.Fatalf("%s: %+v, %v", what, res, err)
			}
			return res[0]
		}
		wantRow := func(what string, status leasework.Status, attempt, snoozes, maxAttempts int) lease.Row {
			t.Helper()
			r, err := s.Get(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != status || r.Attempt != attempt || r.Snoozes != snoozes || r.MaxAttempts != maxAttempts {
				t.Fatalf("row after %s: %s, attempt %d, snoozes %d, budget %d; want %s, %d, %d, %d",
					what, r.Status, r.Attempt, r.Snoozes, r.MaxAttempts, status, attempt, snoozes, maxAttempts)
			}
			return r
		}
		expire := func(c leasework.Claim) {
			t.Helper()
			if err := leasetest.ExpireLease(ctx, s, c.ID); err != nil { // fixture: the owner crashed
				t.Fatal(err)
			}
		}

		// A snooze, a crash, a failure: the budget of 2 is spent by the
		// crash and the failure.
		first := claim("first claim", 1, 0, 2, false)
		retry("snooze", first, true)
		wantRow("the snooze", leasework.StatusReady, 1, 1, 3)
		expire(claim("claim after the snooze", 2, 1, 3, false))
		last := claim("claim after the crash", 3, 1, 3, true)
		if r := retry("failure on the last attempt", last, false); r.Status != leasework.StatusFailed {
			t.Fatalf("failure after a snooze and a crash, budget 2: %s; want FAILED", r.Status)
		}
		wantRow("the last failure", leasework.StatusFailed, 3, 1, 3)

		// Requeued with the whole budget: no snooze, the budget as enqueued.
		if ids, err := s.Requeue(ctx, lease.RequeueRequest{IDs: []int64{e.ID}}); err != nil || len(ids) != 1 {
			t.Fatalf("requeue = %v, %v", ids, err)
		}
		wantRow("the requeue", leasework.StatusReady, 0, 0, 2)

		// Two snoozes, two crashes: the second lease that runs out ends it.
		retry("snooze after the requeue", claim("first claim after the requeue", 1, 0, 2, false), true)
		retry("second snooze", claim("claim after one snooze", 2, 1, 3, false), true)
		expire(claim("claim after two snoozes", 3, 2, 4, false))
		expire(claim("claim after a crash", 4, 2, 4, true))
		if got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(got) != 0 {
			t.Fatalf("claim after two snoozes and two crashes, budget 2 = %+v, %v; want nothing", got, err)
		}
		r := wantRow("the second crash", leasework.StatusFailed, 4, 2, 4)
		if r.LastError != "lease expired on attempt 4 of 4" {
			t.Errorf("last error %q; want the lease's expiry on the last attempt", r.LastError)
		}
	})
}
