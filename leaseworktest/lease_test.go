package leaseworktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/leaseworktest"
)

func TestExpireLease(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		in := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
		req := lease.ClaimRequest{Kinds: []string{"k"}, Limit: 1, Lease: time.Hour}
		first, err := s.Claim(ctx, req)
		if err != nil || len(first) != 1 {
			t.Fatalf("claim: %v, %v", first, err)
		}
		if again, err := s.Claim(ctx, req); err != nil || len(again) != 0 {
			t.Fatalf("a live lease was claimed again: %v, %v", again, err)
		}

		leaseworktest.ExpireLease(t, ctx, s, in[0].ID)
		second, err := s.Claim(ctx, req)
		if err != nil || len(second) != 1 {
			t.Fatalf("claim after the expiry: %v, %v", second, err)
		}
		if second[0].Generation != 2 || !second[0].Reclaimed {
			t.Errorf("reclaim %+v, want generation 2, reclaimed", second[0])
		}
		if _, err := s.Write(ctx, lease.Complete(first[0].Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("the stale owner's completion: %v, want ErrLeaseLost", err)
		}
		if _, err := s.Write(ctx, lease.Complete(second[0].Ref())); err != nil {
			t.Fatal(err)
		}

		// A row that is not INPROGRESS has no lease to expire.
		if msg := failure(t, func(tb testing.TB) { leaseworktest.ExpireLease(tb, ctx, s, in[0].ID) }); !strings.Contains(msg, "want 1 INPROGRESS row") {
			t.Errorf("expiring a DONE row: %q", msg)
		}
		if msg := failure(t, func(tb testing.TB) { leaseworktest.ExpireLease(tb, ctx, nil, in[0].ID) }); !strings.Contains(msg, "store is nil") {
			t.Errorf("a nil store: %q", msg)
		}
	})
}

func TestMakeDue(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		in := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
		req := lease.ClaimRequest{Kinds: []string{"k"}, Limit: 1, Lease: time.Hour}
		c, err := s.Claim(ctx, req)
		if err != nil || len(c) != 1 {
			t.Fatalf("claim: %v, %v", c, err)
		}
		if _, err := s.Write(ctx, lease.Retry(c[0].Ref(), time.Hour, "later")); err != nil {
			t.Fatal(err)
		}
		if again, err := s.Claim(ctx, req); err != nil || len(again) != 0 {
			t.Fatalf("a retry due in an hour was claimed: %v, %v", again, err)
		}
		leaseworktest.MakeDue(t, ctx, s, in[0].ID)
		again, err := s.Claim(ctx, req)
		if err != nil || len(again) != 1 || again[0].Attempt != 2 || again[0].LastError != "later" {
			t.Fatalf("claim after MakeDue: %+v, %v", again, err)
		}
		if msg := failure(t, func(tb testing.TB) { leaseworktest.MakeDue(tb, ctx, s, in[0].ID) }); !strings.Contains(msg, "0 rows matched") {
			t.Errorf("making an INPROGRESS row due: %q", msg)
		}
	})
}
