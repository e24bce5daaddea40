package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Cancelling a READY event ends it DISCARDED with its reason, and nothing
// claims it; a finished one cannot be cancelled, a missing one is not found.
func TestCancelEndsAWaitingEvent(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		e := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e"})[0]
		res, err := s.Cancel(ctx, e.ID, "customer withdrew")
		if err != nil || res.Generation != 1 || res.Stopping {
			t.Fatalf("Cancel = %+v, %v; want generation 1, not stopping", res, err)
		}
		r, err := s.Get(ctx, e.ID)
		if err != nil || r.Status != leasework.StatusDiscarded || r.LastError != "cancelled: customer withdrew" || r.Generation != 1 || r.CancelledAt == nil {
			t.Fatalf("row after cancel: %+v, %v; want DISCARDED at generation 1, cancelled, last error \"cancelled: customer withdrew\"", r, err)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); len(got) != 0 {
			t.Errorf("claim after cancel = %v; want nothing", got)
		}
		if _, err := s.Cancel(ctx, e.ID, ""); !errors.Is(err, lease.ErrFinished) || strings.Count(err.Error(), "lease:") != 1 {
			t.Errorf("cancelling a cancelled event: %v; want ErrFinished, prefixed once", err)
		}
		if _, err := s.Cancel(ctx, e.ID+1000, ""); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("cancelling a missing row: %v; want ErrNotFound", err)
		}
	})
}

// Cancelling a running event takes it from its owner at once: every write
// the owner makes afterwards, batched or single, is rejected, and the
// rejection says the event was cancelled. The row waits for the attempt
// (INPROGRESS, at its generation) until the owner's first outcome write,
// which ends it DISCARDED.
func TestCancelFencesTheRunningAttempt(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		ref := claims[0].Ref()
		res, err := s.Cancel(ctx, ref.ID, "")
		if err != nil || !res.Stopping || res.Generation != ref.Generation {
			t.Fatalf("Cancel = %+v, %v; want stopping at generation %d", res, err, ref.Generation)
		}
		if r, err := s.Get(ctx, ref.ID); err != nil || r.Status != leasework.StatusInProgress || r.CancelledAt == nil {
			t.Fatalf("row cancelled while it runs: %+v, %v; want INPROGRESS, cancelled", r, err)
		}
		for name, w := range map[string]lease.Write{
			"renew":    lease.Renew(ref, time.Minute),
			"complete": lease.Complete(ref),
			"retry":    lease.Retry(ref, 0, "x"),
			"fail":     lease.Fail(ref, "x"),
			"release":  lease.Release(ref),
		} {
			res, err := s.WriteMany(ctx, w)
			if err != nil || len(res) != 1 {
				t.Fatalf("%s: %v, %v", name, res, err)
			}
			if res[0].Verdict != lease.VerdictCancelled || !errors.Is(res[0].Err, leasework.ErrCancelled) || !errors.Is(res[0].Err, leasework.ErrLeaseLost) {
				t.Errorf("%s after cancel: %+v; want rejected as cancelled (ErrCancelled, ErrLeaseLost)", name, res[0])
			}
		}
		if _, err := s.Write(ctx, lease.Progress(ref, []byte("p"))); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("progress after cancel: %v; want ErrLeaseLost", err)
		}
		r, err := s.Get(ctx, ref.ID)
		if err != nil || r.Status != leasework.StatusDiscarded || r.Generation <= ref.Generation || r.LastError != "cancelled" {
			t.Errorf("row after the stale writes: %+v, %v; want DISCARDED above %d, last error \"cancelled\"", r, err, ref.Generation)
		}
	})
}

// A cancelled keyed event passes its key on: the next event of the key
// becomes claimable.
func TestCancelPassesTheKeyOn(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "x", EventID: "x1"}, lease.Event{Kind: "k", Key: "x", EventID: "x2"})
	if _, err := s.Cancel(ctx, ids[0].ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); strings.Join(got, ",") != "x2" {
		t.Errorf("claim after cancelling the key's head = %v; want x2", got)
	}
}
