package framework_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Transactional handlers on a capped pool leave the worker its connections:
// with a pool of 10, at most 10 - ReservedConns transactions are open at
// once, and while that many are held open the worker still claims and
// completes events of another kind. Without the bound, 20 blocked
// transactions took every connection, and no statement of the worker's
// could run.
func TestTransactionalHandlersLeaveTheWorkerItsConnections(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const poolCap, txEvents, plainEvents = 10, 20, 5
		turns := poolCap - framework.ReservedConns
		s := newStore(t, drv)
		db := pgtest.Open(t, drv)
		db.SetMaxOpenConns(poolCap)
		w, err := framework.New(db, drv, framework.Config{
			Schema: s.Schema(), Table: s.Table(), Concurrency: 40, Retention: -1, Logger: testLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		inside, most := 0, 0
		full := make(chan struct{}) // closed once turns transactions are open together
		release := make(chan struct{})
		var fullOnce sync.Once
		registerTx(t, w, "tx", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			mu.Lock()
			inside++
			most = max(most, inside)
			if inside == turns {
				fullOnce.Do(func() { close(full) })
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				inside--
				mu.Unlock()
			}()
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				return err
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		register(t, w, "plain", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
		txIDs := pgtest.EnqueueN(t, s, txEvents, "tx")
		start(t, w)
		recv(t, full, "the transactions to fill their turns")

		// Every turn is taken and the other handlers wait for one: the
		// worker's own statements still run.
		plain := pgtest.EnqueueN(t, s, plainEvents, "plain")
		for _, e := range plain {
			waitRow(t, s, e.ID, "a plain event to be completed while the transactions are held", func(r lease.Row) bool {
				return r.Status == leasework.StatusDone
			})
		}
		close(release)
		for _, e := range txIDs {
			waitRow(t, s, e.ID, "every transactional event to be completed", func(r lease.Row) bool {
				return r.Status == leasework.StatusDone
			})
		}
		// A row is DONE once the handler's transaction commits; the worker
		// counts it after the handler returns.
		waitFor(t, "every completion to be counted", func() bool { return w.Counters().Completed == txEvents+plainEvents })
		mu.Lock()
		defer mu.Unlock()
		if most != turns {
			t.Errorf("at most %d transactions were open at once; want %d (pool of %d less %d reserved)", most, turns, poolCap, framework.ReservedConns)
		}
		if c := w.Counters(); c.Completed != txEvents+plainEvents || c.LeasesLost != 0 || c.Retried != 0 {
			t.Errorf("counters %+v; want %d completed, no lease lost, no retry", c, txEvents+plainEvents)
		}
	})
}
