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

func TestCompleteAndDeleteIsGuarded(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "a"}, lease.Event{Kind: "k", EventID: "b"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %v, %v; want 2 claims", claims, err)
	}
	// A newer generation of the second row makes its first claim stale.
	if _, err := leasetest.NewerGeneration(ctx, s, claims[1].ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := s.WriteMany(ctx, lease.CompleteAndDelete(claims[0].Ref()), lease.CompleteAndDelete(claims[1].Ref()))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Verdict != lease.VerdictAccepted || res[0].Err != nil || res[0].Status != leasework.StatusDone {
		t.Errorf("owned claim: %+v; want accepted with status DONE", res[0])
	}
	if res[1].Verdict != lease.VerdictLost || !errors.Is(res[1].Err, leasework.ErrLeaseLost) {
		t.Errorf("stale claim: %+v; want lost (ErrLeaseLost)", res[1])
	}
	if _, err := s.Get(ctx, claims[0].ID); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("completed row: Get = %v; want ErrNotFound", err)
	}
	row, err := s.Get(ctx, claims[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != leasework.StatusInProgress || row.Generation != claims[1].Generation+1 {
		t.Errorf("stale claim's row: %s generation %d; want INPROGRESS generation %d unchanged",
			row.Status, row.Generation, claims[1].Generation+1)
	}
}
