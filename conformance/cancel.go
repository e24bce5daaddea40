package conformance

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// The properties of cancelling an event from outside (Store.Cancel): the
// cancel is fenced, as every other change of ownership is.
func cancelProperties() []property {
	return []property{
		{"CancelledAttemptCannotWriteAnything", cancelledAttemptCannotWrite},
		{"CancelledEventIsNeverClaimedAndPassesItsKeyOn", cancelledEventIsNeverClaimed},
		{"CancelNeverUndoesACommittedCompletion", cancelNeverUndoesACompletion},
	}
}

// Cancelling a running event fences its attempt at once and ends it only
// when the attempt stops: the row stays INPROGRESS at the attempt's
// generation, under its lease, marked cancelled (Row.CancelledAt, last
// error "cancelled: reason"), and every write the attempt makes is
// rejected. Renewals, progress, and completions in a transaction (WriteTx
// of lease.Complete and of lease.CompleteAndDelete: ErrLeaseLost, the
// transaction's business write rolled back with it) change nothing. The
// attempt's first outcome write — here a completion in a batch, beside a
// live claim (accepted) and a merely stale one (rejected without being
// called cancelled) — is rejected as cancelled and is the attempt's stop:
// the row ends DISCARDED at a new generation. Every write after that —
// renew, complete, complete-and-delete, retry, snooze, fail and release,
// batched (WriteMany) and single (Write), each matching
// leasework.ErrCancelled and leasework.ErrLeaseLost, and reported
// lease.VerdictCancelled — changes nothing. The row is never claimed
// again, and cancelling it again is lease.ErrFinished.
func cancelledAttemptCannotWrite(e *env) {
	table := e.effects()
	e.enqueueN(3)
	claims := e.claim(3)
	if len(claims) != 3 {
		e.t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	c, live, stale := claims[0], claims[1], claims[2]
	res, err := e.store.Cancel(e.ctx, c.ID, "operator")
	wantOK(e.t, "cancel of a running event", err)
	if !res.Stopping || res.Generation != c.Generation {
		e.t.Fatalf("cancel of row %d running at generation %d: %+v; want Stopping at its attempt's generation", c.ID, c.Generation, res)
	}
	marked := e.wantState(c.ID, leasework.StatusInProgress, c.Generation)
	if marked.LastError != "cancelled: operator" || marked.CancelledAt == nil || marked.LeaseUntil == nil || marked.FinishedAt != nil {
		e.t.Fatalf("row cancelled while it runs: last_error %q cancelled_at %v lease_until %v finished_at %v; want \"cancelled: operator\", a time, its lease, unfinished",
			marked.LastError, marked.CancelledAt, marked.LeaseUntil, marked.FinishedAt)
	}
	ref, refs := c.Ref(), []leasework.Ref{c.Ref()}

	// What the running attempt may still do changes nothing.
	for _, w := range []struct {
		name  string
		write func() error
	}{
		{"WriteMany(Renew)", func() error {
			res, err := e.store.WriteMany(e.ctx, renewals(refs, testLease)...)
			if err := answered(res, err); err != nil {
				return err
			}
			if res[0].Verdict != lease.VerdictCancelled {
				return fmt.Errorf("%+v is not VerdictCancelled", res[0])
			}
			return res[0].Err
		}},
		{"Write(Renew)", func() error { return e.write(lease.Renew(ref, testLease)) }},
	} {
		if err := w.write(); !errors.Is(err, leasework.ErrCancelled) || !errors.Is(err, leasework.ErrLeaseLost) {
			e.t.Fatalf("%s by the cancelled attempt: err = %v; want VerdictCancelled, ErrCancelled and ErrLeaseLost", w.name, err)
		}
		e.wantUnchanged(w.name+" by the cancelled attempt", marked)
	}
	wantLost(e.t, "Write(Progress) by the cancelled attempt", e.write(lease.Progress(ref, []byte("page=2"))))
	e.wantUnchanged("Write(Progress) by the cancelled attempt", marked)
	for _, tw := range []struct {
		name     string
		complete func(leasework.Ref) lease.Write
	}{{"WriteTx(Complete)", lease.Complete}, {"WriteTx(CompleteAndDelete)", lease.CompleteAndDelete}} {
		tx, err := e.applyInTx(table, c, tw.complete)
		wantLost(e.t, tw.name+" by the cancelled attempt", err)
		if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
			e.t.Fatalf("Commit after %s was rejected: %v; want sql.ErrTxDone (already rolled back)", tw.name, err)
		}
		if n := e.countEffects(table, c.EventID); n != 0 {
			e.t.Fatalf("the cancelled attempt's business write was committed with %s (%d rows); want rolled back", tw.name, n)
		}
		e.wantUnchanged(tw.name+" by the cancelled attempt", marked)
	}

	// One batch: the cancelled claim, a live one and a stale one.
	newer := e.newerGeneration(stale.ID)
	batch := []leasework.Ref{stale.Ref(), ref, live.Ref()}
	results, err := e.store.WriteMany(e.ctx, completes(batch)...)
	wantOK(e.t, "WriteMany(Complete) of a stale, a cancelled and a live claim", answered(results, err))
	if len(results) != 3 {
		e.t.Fatalf("WriteMany(Complete) of 3 claims returned %d results", len(results))
	}
	for i, r := range results {
		if r.Ref != batch[i] {
			e.t.Fatalf("result %d is for %+v, want %+v", i, r.Ref, batch[i])
		}
	}
	if r := results[0]; r.Verdict == lease.VerdictCancelled || errors.Is(r.Err, leasework.ErrCancelled) || !errors.Is(r.Err, leasework.ErrLeaseLost) {
		e.t.Fatalf("completion of a stale, not cancelled, claim: %+v; want ErrLeaseLost, neither VerdictCancelled nor ErrCancelled", r)
	}
	if r := results[1]; r.Verdict != lease.VerdictCancelled || !errors.Is(r.Err, leasework.ErrCancelled) {
		e.t.Fatalf("completion of the cancelled claim in a batch: %+v; want VerdictCancelled, ErrCancelled", r)
	}
	if r := results[2]; r.Err != nil || r.Verdict == lease.VerdictCancelled || r.Status != leasework.StatusDone {
		e.t.Fatalf("completion of a live claim beside a cancelled one: %+v; want accepted, DONE", r)
	}
	e.wantState(stale.ID, leasework.StatusInProgress, newer.Generation)
	e.wantState(live.ID, leasework.StatusDone, live.Generation)
	cancelled := e.row(c.ID)
	if cancelled.Status != leasework.StatusDiscarded || cancelled.Generation <= c.Generation || cancelled.LeaseUntil != nil ||
		cancelled.FinishedAt == nil || cancelled.CancelledAt == nil || cancelled.LastError != "cancelled: operator" {
		e.t.Fatalf("cancelled row after its attempt's completion was rejected: %+v; want DISCARDED above generation %d, finished, cancelled: operator",
			cancelled, c.Generation)
	}

	batched := []struct {
		name  string
		write func() ([]lease.Result, error)
	}{
		{"WriteMany(Renew)", func() ([]lease.Result, error) { return e.store.WriteMany(e.ctx, renewals(refs, testLease)...) }},
		{"WriteMany(Complete)", func() ([]lease.Result, error) { return e.store.WriteMany(e.ctx, completes(refs)...) }},
		{"WriteMany(CompleteAndDelete)", func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, completesAndDeletes(refs)...)
		}},
		{"WriteMany(Retry)", func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Retry(ref, 0, "boom"))
		}},
		{"WriteMany(Snooze)", func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Snooze(ref, time.Minute, c.LastError))
		}},
		{"WriteMany(Fail)", func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Fail(ref, "boom"))
		}},
		{"WriteMany(Release)", func() ([]lease.Result, error) { return e.store.WriteMany(e.ctx, releases(refs)...) }},
	}
	for _, w := range batched {
		res, err := w.write()
		wantOK(e.t, w.name+" by the cancelled attempt", answered(res, err))
		if len(res) != 1 || res[0].Ref != ref || res[0].Verdict != lease.VerdictCancelled ||
			!errors.Is(res[0].Err, leasework.ErrCancelled) || !errors.Is(res[0].Err, leasework.ErrLeaseLost) {
			e.t.Fatalf("%s by the cancelled attempt: %+v; want one result, VerdictCancelled, its error matching ErrCancelled and ErrLeaseLost", w.name, res)
		}
		e.wantUnchanged(w.name+" by the cancelled attempt", cancelled)
	}

	single := []struct {
		name  string
		write func() error
	}{
		{"Write(Renew)", func() error { return e.write(lease.Renew(ref, testLease)) }},
		{"Write(Complete)", func() error { return e.write(lease.Complete(ref)) }},
		{"Write(Retry)", func() error { return e.write(lease.Retry(ref, 0, "boom")) }},
		{"Write(Fail)", func() error { return e.write(lease.Fail(ref, "boom")) }},
		{"Write(Release)", func() error { return e.write(lease.Release(ref)) }},
	}
	for _, w := range single {
		if err := w.write(); !errors.Is(err, leasework.ErrCancelled) || !errors.Is(err, leasework.ErrLeaseLost) {
			e.t.Fatalf("%s by the cancelled attempt: err = %v; want ErrCancelled and ErrLeaseLost", w.name, err)
		}
		e.wantUnchanged(w.name+" by the cancelled attempt", cancelled)
	}
	wantLost(e.t, "Write(Progress) by the cancelled attempt", e.write(lease.Progress(ref, []byte("page=2"))))
	e.wantUnchanged("Write(Progress) by the cancelled attempt", cancelled)

	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed %s; want nothing (the cancelled row is finished, the other two are owned or done)", describe(got))
	}
	if again, err := e.store.Cancel(e.ctx, c.ID, "twice"); !errors.Is(err, lease.ErrFinished) {
		e.t.Fatalf("cancel of a cancelled event = %+v, %v; want lease.ErrFinished", again, err)
	}
	e.wantUnchanged("the second cancel", cancelled)
}

// A cancelled event is never claimed, whatever state it was cancelled in:
// READY, INPROGRESS with a lease that has run out, or WAITING behind its
// key's head. A keyed event cancelled as its key's head passes the key on,
// from each state a head can be in (READY, INPROGRESS, FAILED): the next
// event of the key, and only it, becomes claimable — for a head running
// under a live lease, only once its attempt has stopped (its owner's
// outcome, rejected as cancelled); until then nothing of its key is
// claimed. A cancelled follower is passed over when its turn comes. A DONE
// event cannot be cancelled (lease.ErrFinished) and stays DONE.
func cancelledEventIsNeverClaimed(e *env) {
	evs := e.enqueue(
		lease.Event{Kind: "k", EventID: "ready"},
		lease.Event{Kind: "k", EventID: "expired"},
		lease.Event{Kind: "k", EventID: "done"})
	ready, expired, done := evs[0], evs[1], evs[2]
	claims := e.claim(3)
	if len(claims) != 3 {
		e.t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	// Give "ready" back, so that it is READY when cancelled.
	for _, c := range claims {
		switch c.ID {
		case ready.ID:
			wantOK(e.t, "release", e.write(lease.Release(c.Ref())))
		case expired.ID:
			e.expire(c.ID) // fixture: its owner died
		case done.ID:
			wantOK(e.t, "complete", e.write(lease.Complete(c.Ref())))
		}
	}
	e.cancel(ready.ID, "")
	e.cancel(expired.ID, "owner gone")
	if res, err := e.store.Cancel(e.ctx, done.ID, ""); !errors.Is(err, lease.ErrFinished) {
		e.t.Fatalf("cancel of a DONE event = %+v, %v; want lease.ErrFinished", res, err)
	}
	e.wantState(done.ID, leasework.StatusDone, e.gen(1))
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed %s; want nothing: a READY event and an expired lease were cancelled", describe(got))
	}

	// Three keys, one per state of the head when cancelled.
	var events []lease.Event
	for _, key := range []string{"ready", "running", "failed"} {
		for i := 1; i <= 4; i++ {
			events = append(events, lease.Event{Kind: "k", Key: key, EventID: fmt.Sprintf("%s-%d", key, i)})
		}
	}
	rowOf := map[string]int64{}
	for _, en := range e.enqueue(events...) {
		rowOf[en.EventID] = en.ID
	}
	claimed := e.claimEventIDs(10)
	if claimed != "failed-1 ready-1 running-1" {
		e.t.Fatalf("claimed %s; want the three heads, failed-1 ready-1 running-1", claimed)
	}
	heads := map[string]leasework.Ref{}
	for _, k := range []string{"ready", "running", "failed"} {
		heads[k] = leasework.Ref{ID: rowOf[k+"-1"], Generation: e.gen(1)}
	}
	wantOK(e.t, "release", e.write(lease.Release(heads["ready"])))
	wantOK(e.t, "fail", e.write(lease.Fail(heads["failed"], "broken")))
	// ready-1 is READY again: claim nothing, so that it stays READY.
	for _, k := range []string{"ready", "running", "failed"} {
		e.cancel(rowOf[k+"-2"], "") // a follower, WAITING
		e.cancel(rowOf[k+"-1"], "") // the head
	}
	claimed = e.claimEventIDs(10)
	if claimed != "failed-3 ready-3" {
		e.t.Fatalf("after cancelling each key's head and first follower, claimed %s; want failed-3 ready-3 (running-1's attempt has not stopped)", claimed)
	}
	// running-1's owner stops: its release is rejected as cancelled and
	// ends the head.
	if err := e.write(lease.Release(heads["running"])); !errors.Is(err, leasework.ErrCancelled) {
		e.t.Fatalf("release by the cancelled head's attempt: %v; want ErrCancelled", err)
	}
	if r := e.row(rowOf["running-1"]); r.Status != leasework.StatusDiscarded {
		e.t.Fatalf("cancelled running head after its attempt stopped: %s; want DISCARDED", r.Status)
	}
	if claimed = e.claimEventIDs(10); claimed != "running-3" {
		e.t.Fatalf("after the cancelled running head's attempt stopped, claimed %s; want running-3", claimed)
	}
	for _, k := range []string{"ready", "running", "failed"} {
		e.wantState(rowOf[k+"-4"], leasework.StatusWaiting, 0)
		wantOK(e.t, "complete", e.write(lease.Complete(leasework.Ref{ID: rowOf[k+"-3"], Generation: e.gen(1)})))
	}
	if claimed = e.claimEventIDs(10); claimed != "failed-4 ready-4 running-4" {
		e.t.Fatalf("after completing each key's third event, claimed %s; want failed-4 ready-4 running-4", claimed)
	}
}

// A cancel and a completion racing: the owner's completion in its
// transaction (WriteTx of lease.Complete) holds the row
// in its open transaction when the cancel is sent, and the transaction
// ends only once the cancel waits on it (a backend blocked by the
// transaction's, in pg_stat_activity and pg_blocking_pids; a cancel that
// returns without waiting fails the property). If the transaction
// commits, the completion stands: the cancel reports lease.ErrFinished and
// the row stays DONE at the claim's generation. If it rolls back, the
// cancel wins: the attempt still holds its lease, so the row is marked and
// stays INPROGRESS, and the owner's next completion is rejected as
// cancelled and ends it DISCARDED.
func cancelNeverUndoesACompletion(e *env) {
	table := e.effects()
	e.enqueueN(2)
	committed, rolledBack := e.claimOne(), e.claimOne()
	for i, c := range []leasework.Claim{committed, rolledBack} {
		commit := i == 0
		tx, err := e.applyInTx(table, c, lease.Complete)
		wantOK(e.t, "WriteTx(Complete)", err)
		var holder int64
		if err := tx.QueryRowContext(e.ctx, "SELECT pg_backend_pid()").Scan(&holder); err != nil {
			tx.Rollback()
			e.t.Fatalf("backend of the completing transaction: %v", err)
		}
		result := make(chan error, 1)
		var res lease.CancelResult
		go func() {
			var err error
			res, err = e.store.Cancel(e.ctx, c.ID, "race")
			result <- err
		}()
		// The race is only a race once the cancel waits on the completing
		// transaction: end that transaction only when a backend is blocked
		// by it.
		if err := e.waitBlockedBy(holder, result); err != nil {
			tx.Rollback()
			e.t.Fatalf("cancel of row %d while a completion holds it in an open transaction: %v", c.ID, err)
		}
		if commit {
			wantOK(e.t, "commit", tx.Commit())
		} else {
			wantOK(e.t, "rollback", tx.Rollback())
		}
		var err2 error
		select {
		case err2 = <-result:
		case <-e.ctx.Done():
			e.t.Fatalf("cancel of row %d did not return: %v", c.ID, e.ctx.Err())
		}
		if commit {
			if !errors.Is(err2, lease.ErrFinished) {
				e.t.Fatalf("cancel racing a completion that committed: %v; want lease.ErrFinished", err2)
			}
			e.wantState(c.ID, leasework.StatusDone, c.Generation)
			if n := e.countEffects(table, c.EventID); n != 1 {
				e.t.Fatalf("effects of the committed completion: %d; want 1", n)
			}
			continue
		}
		wantOK(e.t, "cancel racing a completion that rolled back", err2)
		r := e.row(c.ID)
		if !res.Stopping || r.Status != leasework.StatusInProgress || r.Generation != c.Generation || r.CancelledAt == nil {
			e.t.Fatalf("after the completion rolled back and the cancel returned %+v, row %d is %s generation %d cancelled at %v; want it Stopping, INPROGRESS at generation %d, marked",
				res, c.ID, r.Status, r.Generation, r.CancelledAt, c.Generation)
		}
		if err := e.write(lease.Complete(c.Ref())); !errors.Is(err, leasework.ErrCancelled) {
			e.t.Fatalf("completion after the cancel won: %v; want ErrCancelled", err)
		}
		if r := e.row(c.ID); r.Status != leasework.StatusDiscarded || r.Generation <= c.Generation {
			e.t.Fatalf("after the cancelled attempt's completion, row %d is %s generation %d; want DISCARDED above generation %d",
				c.ID, r.Status, r.Generation, c.Generation)
		}
		if n := e.countEffects(table, c.EventID); n != 0 {
			e.t.Fatalf("effects of the rolled-back completion: %d; want 0", n)
		}
	}
}

// waitBlockedBy waits until a backend of this database waits on a lock
// held by the backend holder, and reports an error when that takes longer
// than a few seconds or when done (the blocked call's result) arrives
// first: a call that returns while the other transaction holds the row did
// not wait for it.
func (e *env) waitBlockedBy(holder int64, done <-chan error) error {
	const bound = 10 * time.Second
	deadline := time.Now().Add(bound)
	for {
		var blocked bool
		err := e.db.QueryRowContext(e.ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND $1::int = ANY (pg_blocking_pids(pid)))`, holder).Scan(&blocked)
		if err != nil {
			return fmt.Errorf("read pg_stat_activity: %w", err)
		}
		if blocked {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("it returned (%v) without waiting for the transaction", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no backend waited on the transaction's locks within %v", bound)
		}
	}
}

// cancel cancels row id, which must succeed, and checks the row: one that
// an attempt runs under a live lease is Stopping, INPROGRESS at the
// attempt's generation; any other is DISCARDED at the generation returned,
// a newer one. Both are marked cancelled, with the reason.
func (e *env) cancel(id int64, reason string) {
	e.t.Helper()
	before := e.row(id)
	var running bool // by the database's clock, as the cancel decides
	if err := e.db.QueryRowContext(e.ctx, "SELECT COALESCE($1::timestamptz > statement_timestamp(), false)", before.LeaseUntil).Scan(&running); err != nil {
		e.t.Fatalf("is row %d's lease running: %v", id, err)
	}
	res, err := e.store.Cancel(e.ctx, id, reason)
	wantOK(e.t, fmt.Sprintf("cancel of row %d (%s, %s)", id, before.EventID, before.Status), err)
	want := lease.CancelledPrefix
	if reason != "" {
		want += ": " + reason
	}
	var r lease.Row
	switch {
	case running:
		if !res.Stopping || res.Generation != before.Generation {
			e.t.Fatalf("cancel of row %d running at generation %d: %+v; want Stopping at that generation", id, before.Generation, res)
		}
		r = e.wantState(id, leasework.StatusInProgress, before.Generation)
	case res.Stopping || res.Generation <= before.Generation:
		e.t.Fatalf("cancel of row %d (%s) at generation %d: %+v; want it ended at a newer generation", id, before.Status, before.Generation, res)
	default:
		r = e.wantState(id, leasework.StatusDiscarded, res.Generation)
	}
	if r.LastError != want || r.CancelledAt == nil {
		e.t.Fatalf("cancelled row %d: last_error %q, cancelled_at %v; want %q and a time", id, r.LastError, r.CancelledAt, want)
	}
}

// claimEventIDs claims up to limit rows and returns their event ids,
// sorted and joined by spaces.
func (e *env) claimEventIDs(limit int) string {
	e.t.Helper()
	var ids []string
	for _, c := range e.claim(limit) {
		ids = append(ids, c.EventID)
	}
	slices.Sort(ids) // a claim returns its rows in no particular order
	return strings.Join(ids, " ")
}

// wantUnchanged fails the subtest if the row of before differs from it in
// any column, after what.
func (e *env) wantUnchanged(what string, before lease.Row) {
	e.t.Helper()
	after := e.row(before.ID)
	var diff []string
	field := func(name string, same bool, was, is any) {
		if !same {
			diff = append(diff, fmt.Sprintf("%s %v -> %v", name, was, is))
		}
	}
	field("status", before.Status == after.Status, before.Status, after.Status)
	field("generation", before.Generation == after.Generation, before.Generation, after.Generation)
	field("attempt", before.Attempt == after.Attempt, before.Attempt, after.Attempt)
	field("max_attempts", before.MaxAttempts == after.MaxAttempts, before.MaxAttempts, after.MaxAttempts)
	field("snoozes", before.Snoozes == after.Snoozes, before.Snoozes, after.Snoozes)
	field("lease_until", sameTime(before.LeaseUntil, after.LeaseUntil), before.LeaseUntil, after.LeaseUntil)
	field("next_attempt_at", before.NextAttemptAt.Equal(after.NextAttemptAt), before.NextAttemptAt, after.NextAttemptAt)
	field("last_error", before.LastError == after.LastError, before.LastError, after.LastError)
	field("progress", bytes.Equal(before.Progress, after.Progress), before.Progress, after.Progress)
	field("worker", before.Worker == after.Worker, before.Worker, after.Worker)
	field("updated_at", before.UpdatedAt.Equal(after.UpdatedAt), before.UpdatedAt, after.UpdatedAt)
	field("finished_at", sameTime(before.FinishedAt, after.FinishedAt), before.FinishedAt, after.FinishedAt)
	field("cancelled_at", sameTime(before.CancelledAt, after.CancelledAt), before.CancelledAt, after.CancelledAt)
	if len(diff) > 0 {
		e.t.Fatalf("%s changed row %d: %s", what, before.ID, strings.Join(diff, ", "))
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
