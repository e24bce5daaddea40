package conformance

import (
	"errors"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties of a snooze (lease.Snooze): run again later,
// without spending the attempt budget, under the same guard as a retry.
func snoozeProperties() []property {
	return []property{
		{"SnoozeIsGuardedAndSparesTheBudget", snoozeIsGuarded},
	}
}

// A snooze by a stale owner (a newer generation in place, or its lease run
// out) is rejected with ErrLeaseLost and changes nothing. The owner's
// snooze, on the row's last allowed attempt, sends it READY, due after the
// delay (by the database's clock), at the same generation and attempt,
// with its last error as given, its budget one larger and one snooze
// counted; written again it is recorded (lease.VerdictRecorded) and
// changes nothing. The
// row is not claimed before it is due; once due (by fixture) it is claimed
// with the larger budget, one snooze and one failure, and a plain retry on
// that last attempt ends it FAILED: the snooze added exactly one attempt.
func snoozeIsGuarded(e *env) {
	const delay = 90 * time.Minute
	ev := e.enqueue(lease.Event{Kind: "k", EventID: "event-001", MaxAttempts: 2})[0]
	first := e.claimOne()
	retried, err := e.store.Write(e.ctx, lease.Retry(first.Ref(), 0, "boom"))
	wantOK(e.t, "retry", err)
	if status := retried.Status; status != leasework.StatusReady {
		e.t.Fatalf("retry on attempt 1 of 2 left the row %s, want READY", status)
	}
	last := e.claimOne()
	if last.ID != ev.ID || last.Attempt != 2 || last.MaxAttempts != 2 || last.LastError != "boom" {
		e.t.Fatalf("second claim = %+v; want row %d on attempt 2 of 2 with last error boom", last, ev.ID)
	}
	stale := last.Ref()
	owner := e.newerGeneration(ev.ID) // still attempt 2 of 2
	snooze := func(what string, ref leasework.Ref) lease.Result {
		e.t.Helper()
		res, err := e.store.WriteMany(e.ctx, lease.Snooze(ref, delay, last.LastError))
		wantOK(e.t, what, answered(res, err))
		if len(res) != 1 || res[0].Ref != ref {
			e.t.Fatalf("%s: results %+v; want one, for %+v", what, res, ref)
		}
		return res[0]
	}
	wantStaleRejected := func(what string, ref leasework.Ref) {
		e.t.Helper()
		before := e.row(ref.ID)
		r := snooze(what, ref)
		if !errors.Is(r.Err, leasework.ErrLeaseLost) || r.Verdict == lease.VerdictRecorded || r.Verdict == lease.VerdictCancelled {
			e.t.Fatalf("%s: %+v; want ErrLeaseLost, neither VerdictRecorded nor VerdictCancelled", what, r)
		}
		e.wantUnchanged(what, before)
	}

	wantStaleRejected("a stale owner's snooze", stale)

	from := e.dbNow()
	r := snooze("the owner's snooze", owner)
	to := e.dbNow()
	if r.Err != nil || r.Verdict == lease.VerdictRecorded || r.Status != leasework.StatusReady {
		e.t.Fatalf("the owner's snooze on its last attempt: %+v; want accepted, READY", r)
	}
	snoozed := e.wantState(ev.ID, leasework.StatusReady, owner.Generation)
	if snoozed.Attempt != 2 || snoozed.MaxAttempts != 3 || snoozed.Snoozes != 1 || snoozed.LastError != "boom" || snoozed.FinishedAt != nil {
		e.t.Fatalf("snoozed row: attempt %d of %d, %d snoozes, last_error %q, finished_at %v; want attempt 2 of 3, 1 snooze, boom, not finished",
			snoozed.Attempt, snoozed.MaxAttempts, snoozed.Snoozes, snoozed.LastError, snoozed.FinishedAt)
	}
	if due := snoozed.NextAttemptAt; due.Before(from.Add(delay)) || due.After(to.Add(delay)) {
		e.t.Fatalf("snoozed row is due at %v; want %v after the snooze, between %v and %v", due, delay, from.Add(delay), to.Add(delay))
	}

	r = snooze("the same snooze again", owner)
	if r.Err != nil || r.Verdict != lease.VerdictRecorded || r.Status != leasework.StatusReady {
		e.t.Fatalf("the same snooze written again: %+v; want VerdictRecorded, READY", r)
	}
	e.wantUnchanged("the same snooze again", snoozed)
	wantStaleRejected("the stale owner's snooze after the owner's", stale)

	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed %s; want nothing before the snooze's delay has passed", describe(got))
	}
	wantOK(e.t, "make due", leasetest.MakeDue(e.ctx, e.fix, ev.ID)) // fixture: the delay passes
	again := e.claimOne()
	if again.ID != ev.ID || again.Generation != owner.Generation+1 || again.Attempt != 3 || again.MaxAttempts != 3 || again.LastError != "boom" {
		e.t.Fatalf("claim after the snooze fell due = %+v; want row %d at generation %d, attempt 3 of 3, last error boom",
			again, ev.ID, owner.Generation+1)
	}
	if again.Snoozes != 1 || again.Failures() != 1 {
		e.t.Fatalf("claim after one failure and one snooze: %d snoozes, %d failures; want 1 and 1", again.Snoozes, again.Failures())
	}
	retried, err = e.store.Write(e.ctx, lease.Retry(again.Ref(), 0, "boom 3"))
	wantOK(e.t, "retry on the last attempt", err)
	if status := retried.Status; status != leasework.StatusFailed {
		e.t.Fatalf("retry on attempt 3 of 3 after one snooze left the row %s, want FAILED", status)
	}

	// An owner whose lease ran out, though nobody took the row since.
	e.enqueue(lease.Event{Kind: "k", EventID: "event-002"})
	expired := e.claimOne()
	e.expire(expired.ID) // fixture: the lease ran out
	wantStaleRejected("the snooze of an expired owner", expired.Ref())
}

// dbNow is the database's clock, which due times are measured by.
func (e *env) dbNow() time.Time {
	e.t.Helper()
	var now time.Time
	if err := e.db.QueryRowContext(e.ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		e.t.Fatalf("read the database's clock: %v", err)
	}
	return now
}
