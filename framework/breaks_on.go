//go:build leasework_break

package framework

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/leasework/leasework/lease"
)

// This file breaks the library on purpose. It is built only with the
// leasework_break tag, never in a normal build: the chaos soak
// (internal/rig/chaos) runs against each break, named by $LEASEWORK_BREAK, to
// show that its history checker catches it.

var activeBreak = os.Getenv("LEASEWORK_BREAK")

// breakTx, for the break "tx-split", commits a Transactional handler's
// business writes in their own transaction, then completes the claim
// apart: a stale or cancelled owner's effect commits, and one killed in
// between is applied again by the next attempt.
func breakTx(ctx context.Context, a *attempt, tx *sql.Tx) (handled bool, err error) {
	if activeBreak != "tx-split" {
		return false, nil
	}
	if err := tx.Commit(); err != nil {
		return true, fmt.Errorf("framework: break tx-split: commit: %w", err)
	}
	if _, err := a.w.store.Write(ctx, lease.Complete(a.ref)); err != nil {
		return true, err
	}
	a.setTx(txCommitted)
	return true, nil
}

// breakFiringID, for the break "tick-per-worker", names the worker in a
// firing's event id: every worker enqueues each tick once.
func breakFiringID(id, worker string) string {
	if activeBreak != "tick-per-worker" {
		return id
	}
	return id + "@" + worker
}

// breakFloors, for the break "floors-only", never claims from the oldest
// once the queue has floors, not even in a sweep: a row due before its
// level's floor and still READY (committed late, given a run time already
// past), or a lease that ran out before the lease floor, is never claimed.
func breakFloors(f *floors, full bool) bool {
	if activeBreak != "floors-only" || !full {
		return full
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.from == nil
}
