package framework_test

import (
	"context"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A worker whose poll interval is a day still takes over a crashed owner's
// claim once its lease runs out: an expired lease sends no notification,
// so the worker wakes at the expiry it read after its last short claim.
// The crashed owner's lease is a fixture set to run out three seconds after
// the worker starts; the test waits on the row, never on the time.
func TestWorkerWakesAtAnotherWorkersLeaseExpiry(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: framework.MaxLease, Worker: "crashed"})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim by the crashed owner: %v, %v", claims, err)
		}
		execSQL(t, s, "UPDATE "+s.QualifiedTable()+" SET lease_until = statement_timestamp() + interval '3 seconds' WHERE id = $1", id)

		w := newWorker(t, s, framework.Config{PollInterval: framework.MaxPollInterval})
		register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
		start(t, w)
		row := waitRow(t, s, id, "the crashed owner's claim to be taken over and completed", func(r lease.Row) bool {
			return r.Status == leasework.StatusDone
		})
		if row.Generation != 2 || row.Worker != w.ID() {
			t.Errorf("row %+v; want DONE at generation 2 by %s", row, w.ID())
		}
		if c := w.Counters(); c.Reclaimed != 1 {
			t.Errorf("counters %+v; want the one claim reclaimed", c)
		}
	})
}
