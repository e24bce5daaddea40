package conformance

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// Properties of the completion run in the caller's transaction (invariant
// 13): a handler's business writes and its guarded completion commit
// together or not at all, and an open transaction never holds up renewals.
func txProperties() []property {
	return []property{
		{"StaleOwnerCompleteTxRollsBackItsWrites", staleOwnerCompleteTxRollsBack},
		{"LiveOwnerCompleteTxCommitsBoth", liveOwnerCompleteTxCommitsBoth},
		{"RolledBackCompleteTxLeavesTheClaimOwned", rolledBackCompleteTxLeavesClaimOwned},
		{"RenewalSkipsARowLockedByACompletion", renewalSkipsALockedRow},
	}
}

// effects creates the business table of a subtest, in its schema: one row
// per applied effect, keyed by nothing, so a duplicate would show.
func (e *env) effects() string {
	e.t.Helper()
	table := lease.QuoteIdent(e.schema) + ".effects"
	if _, err := e.db.ExecContext(e.ctx, "CREATE TABLE IF NOT EXISTS "+table+" (event_id text NOT NULL)"); err != nil {
		e.t.Fatalf("create the effects table: %v", err)
	}
	return table
}

func (e *env) countEffects(table, eventID string) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, "SELECT count(*) FROM "+table+" WHERE event_id = $1", eventID).Scan(&n); err != nil {
		e.t.Fatalf("count effects: %v", err)
	}
	return n
}

// applyInTx begins a transaction, writes the effect of c in it, then
// writes c's completion, made by complete (lease.Complete or
// lease.CompleteAndDelete), in the same transaction (Store.WriteTx). It
// returns the open transaction and WriteTx's error.
func (e *env) applyInTx(table string, c leasework.Claim, complete func(leasework.Ref) lease.Write) (*sql.Tx, error) {
	e.t.Helper()
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.ExecContext(e.ctx, "INSERT INTO "+table+" (event_id) VALUES ($1)", c.EventID); err != nil {
		tx.Rollback()
		e.t.Fatalf("business write: %v", err)
	}
	return tx, e.store.WriteTx(e.ctx, tx, complete(c.Ref()))
}

// A stale owner's completion in its transaction (WriteTx of
// lease.Complete) is rejected with ErrLeaseLost, the transaction
// is rolled back with it (a Commit after the rejection cannot commit the
// business write), and the newer claim is untouched; the newer owner then
// completes in its own transaction, and the effect exists once.
func staleOwnerCompleteTxRollsBack(e *env) {
	table := e.effects()
	e.enqueueN(2)
	reclaimed, expired := e.claimOne(), e.claimOne()
	e.expire(reclaimed.ID)
	newer := e.claimOne()
	if newer.ID != reclaimed.ID || newer.Generation != reclaimed.Generation+1 {
		e.t.Fatalf("reclaim got row %d generation %d; want row %d generation %d", newer.ID, newer.Generation, reclaimed.ID, reclaimed.Generation+1)
	}
	e.expire(expired.ID) // its lease ran out, nobody claimed it again

	for _, stale := range []leasework.Claim{reclaimed, expired} {
		tx, err := e.applyInTx(table, stale, lease.Complete)
		wantLost(e.t, "WriteTx(Complete) by a stale owner", err)
		if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
			e.t.Fatalf("Commit after a rejected WriteTx(Complete): %v; want sql.ErrTxDone (already rolled back)", err)
		}
		if n := e.countEffects(table, stale.EventID); n != 0 {
			e.t.Fatalf("the stale owner's business write of %s was committed (%d rows); want rolled back", stale.EventID, n)
		}
	}
	e.wantState(newer.ID, leasework.StatusInProgress, newer.Generation)
	e.wantState(expired.ID, leasework.StatusInProgress, expired.Generation)

	tx, err := e.applyInTx(table, newer, lease.Complete)
	wantOK(e.t, "WriteTx(Complete) by the newer owner", err)
	wantOK(e.t, "commit", tx.Commit())
	e.wantState(newer.ID, leasework.StatusDone, newer.Generation)
	if n := e.countEffects(table, newer.EventID); n != 1 {
		e.t.Fatalf("effects of %s: %d; want exactly 1", newer.EventID, n)
	}
}

// A live owner's completions in its transaction (WriteTx of lease.Complete
// and of lease.CompleteAndDelete) commit the business
// write and the completion together; a second completion of the same claim,
// in another transaction, is rejected and takes its write with it.
func liveOwnerCompleteTxCommitsBoth(e *env) {
	table := e.effects()
	e.enqueueN(2)
	kept, deleted := e.claimOne(), e.claimOne()

	tx, err := e.applyInTx(table, kept, lease.Complete)
	wantOK(e.t, "WriteTx(Complete)", err)
	wantOK(e.t, "commit", tx.Commit())
	e.wantState(kept.ID, leasework.StatusDone, kept.Generation)

	tx, err = e.applyInTx(table, deleted, lease.CompleteAndDelete)
	wantOK(e.t, "WriteTx(CompleteAndDelete)", err)
	wantOK(e.t, "commit", tx.Commit())
	if _, err := e.fix.Get(e.ctx, deleted.ID); !errors.Is(err, lease.ErrNotFound) {
		e.t.Fatalf("row completed by WriteTx(CompleteAndDelete): Get = %v; want lease.ErrNotFound", err)
	}

	// The same claims again, as a handler run twice would: rejected.
	for _, c := range []leasework.Claim{kept, deleted} {
		tx, err := e.applyInTx(table, c, lease.Complete)
		wantLost(e.t, "a second WriteTx(Complete) of the same claim", err)
		tx.Rollback()
	}
	for _, c := range []leasework.Claim{kept, deleted} {
		if n := e.countEffects(table, c.EventID); n != 1 {
			e.t.Fatalf("effects of %s: %d; want exactly 1", c.EventID, n)
		}
	}
}

// A completion in a transaction (WriteTx) that rolls back leaves the claim
// as it was:
// INPROGRESS at its generation and still owned (renewed, then completed).
func rolledBackCompleteTxLeavesClaimOwned(e *env) {
	table := e.effects()
	e.enqueueN(1)
	c := e.claimOne()
	before := e.row(c.ID)
	tx, err := e.applyInTx(table, c, lease.Complete)
	wantOK(e.t, "WriteTx(Complete)", err)
	wantOK(e.t, "rollback", tx.Rollback())

	after := e.wantState(c.ID, leasework.StatusInProgress, c.Generation)
	if !after.LeaseUntil.Equal(*before.LeaseUntil) || after.Attempt != before.Attempt {
		e.t.Fatalf("the rolled-back completion changed the row: %+v -> %+v", before, after)
	}
	if n := e.countEffects(table, c.EventID); n != 0 {
		e.t.Fatalf("effects after the rollback: %d; want 0", n)
	}
	wantOK(e.t, "renew after the rolled-back completion", e.write(lease.Renew(c.Ref(), testLease)))
	tx, err = e.applyInTx(table, c, lease.Complete)
	wantOK(e.t, "WriteTx(Complete) after the rollback", err)
	wantOK(e.t, "commit", tx.Commit())
	e.wantState(c.ID, leasework.StatusDone, c.Generation)
	if n := e.countEffects(table, c.EventID); n != 1 {
		e.t.Fatalf("effects: %d; want exactly 1", n)
	}
}

// A renewal never waits for a transaction that holds a row's lock (a
// handler that completed its claim in its own transaction and has not
// committed yet): it renews the other claims of its batch at once, and
// reports the locked row busy (lease.VerdictBusy), neither renewed nor
// lost. A claim the guard
// rejects in the same batch is still lost. After the commit, the completed
// claim's renewal is lost.
func renewalSkipsALockedRow(e *env) {
	table := e.effects()
	e.enqueueN(4)
	claims := e.claim(4)
	if len(claims) != 4 {
		e.t.Fatalf("claimed %d rows, want 4", len(claims))
	}
	completing, stale := claims[1], claims[3]
	e.newerGeneration(stale.ID)
	before := e.row(completing.ID)
	tx, err := e.applyInTx(table, completing, lease.Complete)
	wantOK(e.t, "WriteTx(Complete)", err)
	defer tx.Rollback()

	refs := []leasework.Ref{claims[3].Ref(), claims[2].Ref(), claims[1].Ref(), claims[0].Ref()}
	// Bounded well below the suite's watchdog: a renewal that waited for the
	// open transaction would end here with a timeout instead of results.
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	res, err := e.store.WriteMany(ctx, renewals(refs, 2*testLease)...)
	if err := answered(res, err); err != nil {
		e.t.Fatalf("renewal beside an open completing transaction: %v; want results at once, without waiting for its lock", err)
	}
	for _, r := range res {
		switch r.Ref {
		case completing.Ref():
			if r.Verdict != lease.VerdictBusy || !errors.Is(r.Err, lease.ErrRowBusy) || errors.Is(r.Err, leasework.ErrLeaseLost) {
				e.t.Fatalf("renewal of the row being completed: %+v; want VerdictBusy, ErrRowBusy, not ErrLeaseLost", r)
			}
		case stale.Ref():
			if r.Verdict == lease.VerdictBusy || !errors.Is(r.Err, leasework.ErrLeaseLost) {
				e.t.Fatalf("renewal of the stale claim: %+v; want ErrLeaseLost, not VerdictBusy", r)
			}
		default:
			if r.Err != nil || r.Verdict == lease.VerdictBusy || !r.LeaseUntil.After(time.Now().Add(testLease)) {
				e.t.Fatalf("renewal of claim %d: %+v; want renewed", r.Ref.ID, r)
			}
		}
	}
	wantOK(e.t, "commit", tx.Commit())
	done := e.wantState(completing.ID, leasework.StatusDone, completing.Generation)
	if !done.UpdatedAt.After(before.UpdatedAt) {
		e.t.Fatalf("the completed row was not updated by the completion: %+v", done)
	}
	wantLost(e.t, "renewal of the claim completed in its transaction", e.write(lease.Renew(completing.Ref(), testLease)))
}
