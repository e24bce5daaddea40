package conformance

import (
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The six tests of the lab article, under its names.
func labProperties() []property {
	return []property{
		{"ClaimThenComplete", claimThenComplete},
		{"UncommittedClaimIsSkippedThenRestored", uncommittedClaimIsSkippedThenRestored},
		{"KilledWorkerClaimIsRecovered", killedWorkerClaimIsRecovered},
		{"StaleOwnerCannotComplete", staleOwnerCannotComplete},
		{"StaleOwnerCannotRetry", staleOwnerCannotRetry},
		{"ExpiredOwnerCannotFinalize", expiredOwnerCannotFinalize},
	}
}

// LabTests are the names of the lab article's six tests, in its order.
var LabTests = []string{
	"ClaimThenComplete",
	"UncommittedClaimIsSkippedThenRestored",
	"KilledWorkerClaimIsRecovered",
	"StaleOwnerCannotComplete",
	"StaleOwnerCannotRetry",
	"ExpiredOwnerCannotFinalize",
}

// Happy path: the claim returns the row with its first generation (1 on a
// server never promoted; see gen), the completion is
// accepted, and the row is DONE without a lease.
func claimThenComplete(e *env) {
	ev := e.enqueueN(1)[0]
	c := e.claimOne()
	if c.ID != ev.ID || c.EventID != "event-001" || c.Generation != e.gen(1) || c.Attempt != 1 || c.Kind != "k" {
		e.t.Fatalf("claim = %+v; want row %d, event-001, generation %d, attempt 1", c, ev.ID, e.gen(1))
	}
	if !c.LeaseUntil.After(time.Now().Add(-time.Minute)) {
		e.t.Fatalf("claim lease_until %v is not a live deadline", c.LeaseUntil)
	}
	e.wantState(c.ID, leasework.StatusInProgress, e.gen(1))
	wantOK(e.t, "complete", e.write(lease.Complete(c.Ref())))
	r := e.wantState(c.ID, leasework.StatusDone, e.gen(1))
	if r.LeaseUntil != nil {
		e.t.Fatalf("DONE row keeps lease_until %v", r.LeaseUntil)
	}
	if more := e.claim(1); len(more) != 0 {
		e.t.Fatalf("a DONE row was claimed again: %+v", more)
	}
}

// A claim still open in a transaction holds its row: a second connection
// skips it and claims another; when the first rolls back, its row is
// claimable again and the rolled-back claim left no trace in the generation.
func uncommittedClaimIsSkippedThenRestored(e *env) {
	evs := e.enqueueN(2)
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback()
	open, err := e.store.ClaimTx(e.ctx, tx, lease.ClaimRequest{Limit: 1, Lease: testLease})
	if err != nil || len(open) != 1 || open[0].ID != evs[0].ID {
		e.t.Fatalf("claim in open transaction = %+v, %v; want row %d", open, err, evs[0].ID)
	}
	other := e.claimOne()
	if other.ID != evs[1].ID || other.Generation != e.gen(1) {
		e.t.Fatalf("second connection claimed %+v; want row %d generation %d (the locked row skipped)", other, evs[1].ID, e.gen(1))
	}
	if err := tx.Rollback(); err != nil {
		e.t.Fatal(err)
	}
	e.wantState(evs[0].ID, leasework.StatusReady, 0)
	again := e.claimOne()
	if again.ID != evs[0].ID || again.Generation != e.gen(1) || again.EventID != "event-001" {
		e.t.Fatalf("after rollback claimed %+v; want row %d event-001 generation %d", again, evs[0].ID, e.gen(1))
	}
}

// With a newer live generation in place, a completion carrying the old one
// is rejected and changes nothing.
func staleOwnerCannotComplete(e *env) {
	e.enqueueN(1)
	old := e.claimOne()
	newer := e.newerGeneration(old.ID)
	before := e.row(old.ID)
	wantLost(e.t, "stale complete", e.write(lease.Complete(old.Ref())))
	after := e.wantState(old.ID, leasework.StatusInProgress, newer.Generation)
	if !after.LeaseUntil.Equal(*before.LeaseUntil) {
		e.t.Fatalf("stale complete moved lease_until from %v to %v", before.LeaseUntil, after.LeaseUntil)
	}
	wantOK(e.t, "current owner's complete", e.write(lease.Complete(newer)))
	e.wantState(old.ID, leasework.StatusDone, newer.Generation)
}

// The same for retry; and no retry moves a DONE row back to READY.
func staleOwnerCannotRetry(e *env) {
	e.enqueueN(1)
	old := e.claimOne()
	newer := e.newerGeneration(old.ID)
	err := e.write(lease.Retry(old.Ref(), time.Minute, "stale"))
	wantLost(e.t, "stale retry", err)
	r := e.wantState(old.ID, leasework.StatusInProgress, newer.Generation)
	if r.LastError != "" {
		e.t.Fatalf("stale retry recorded last_error %q", r.LastError)
	}
	wantOK(e.t, "current owner's complete", e.write(lease.Complete(newer)))
	for _, ref := range []leasework.Ref{old.Ref(), newer} {
		err := e.write(lease.Retry(ref, 0, "late"))
		wantLost(e.t, "retry of a DONE row", err)
	}
	e.wantState(old.ID, leasework.StatusDone, newer.Generation)
}

// An owner whose lease expired cannot finalize, even before anyone has
// reclaimed the row (the lab's strict policy).
func expiredOwnerCannotFinalize(e *env) {
	e.enqueueN(2)
	claims := e.claim(2)
	if len(claims) != 2 {
		e.t.Fatalf("claimed %d rows, want 2", len(claims))
	}
	done, retried := claims[0], claims[1]
	e.expire(done.ID)    // fixture: the lease ran out
	e.expire(retried.ID) // fixture: the lease ran out
	wantLost(e.t, "complete after expiry", e.write(lease.Complete(done.Ref())))
	err := e.write(lease.Retry(retried.Ref(), 0, "late"))
	wantLost(e.t, "retry after expiry", err)
	e.wantState(done.ID, leasework.StatusInProgress, e.gen(1))
	e.wantState(retried.ID, leasework.StatusInProgress, e.gen(1))
}

// newerGeneration constructs a newer live claim directly (the fixture that
// tests write protection independently of the reclaim query).
func (e *env) newerGeneration(id int64) leasework.Ref {
	e.t.Helper()
	ref, err := leasetest.NewerGeneration(e.ctx, e.fix, id, testLease)
	if err != nil {
		e.t.Fatal(err)
	}
	return ref
}
