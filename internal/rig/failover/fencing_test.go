package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A claim committed on a primary that fails over before its standby
// received it is lost with the old primary, and its owner does not know.
// The new primary must not hand the same generation to a second owner:
// the stale owner's writes would match the guard and be accepted. Every
// claim after a promotion outranks every claim before it, so the stale
// owner's completion is rejected and the second owner keeps the row.
func TestAsyncFailoverNeverReissuesAGeneration(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		p := newPair(t, false)
		schema := pgtest.SchemaName()
		both := dsn(drv, "fencing", p.primary, p.standby)
		a := openStore(t, drv, both, schema, true)
		_, err := pgtest.EnqueueCommitted(ctx, a, lease.Event{Kind: "k", EventID: "e"})
		must(t, "enqueue", err)
		must(t, "wait for the standby to catch up", p.primary.CaughtUp(ctx))
		// The standby stops receiving: A's claim reaches the primary alone.
		must(t, "halt the standby", p.standby.Halt())
		claimsA, err := a.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "A"})
		if err != nil || len(claimsA) != 1 {
			t.Fatalf("A's claim = %v, %v; want one", claimsA, err)
		}
		must(t, "crash the primary", p.primary.Crash())
		must(t, "start the standby again", p.standby.Start(ctx))
		p.promote(t)

		// On the new primary the row is READY again; B claims it.
		b := openStore(t, drv, both, schema, false)
		var claimsB []leasework.Claim
		err = retryConn(t, drv, "B's claim", func() (err error) {
			claimsB, err = b.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "B"})
			return err
		})
		if err != nil || len(claimsB) != 1 {
			t.Fatalf("B's claim on the new primary = %v, %v; want the row A claimed on the old one", claimsB, err)
		}
		gA, gB := claimsA[0].Generation, claimsB[0].Generation
		t.Logf("A claimed generation %d on the old primary; B claimed generation %d on the new one", gA, gB)
		if gB <= gA {
			t.Errorf("B's generation %d does not outrank A's %d from before the failover", gB, gA)
		}

		// A, stale, completes through its pool, which now reaches the new primary.
		err = retryConn(t, drv, "A's completion", func() error {
			_, err := a.Write(ctx, lease.Complete(claimsA[0].Ref()))
			return err
		})
		if !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("A's completion after the failover = %v; want leasework.ErrLeaseLost", err)
		}
		var r lease.Row
		must(t, "read the row after A's completion", retryConn(t, drv, "get", func() (err error) {
			r, err = b.Get(ctx, claimsB[0].ID)
			return err
		}))
		if r.Status != leasework.StatusInProgress || r.Generation != gB || r.Worker != "B" {
			t.Errorf("row after A's completion: %s at generation %d by %q; want INPROGRESS at %d by B", r.Status, r.Generation, r.Worker, gB)
		}
		if _, err := b.Write(ctx, lease.Complete(claimsB[0].Ref())); err != nil {
			t.Errorf("B's completion: %v", err)
		}
	})
}
