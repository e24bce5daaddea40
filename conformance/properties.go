package conformance

import (
	"bytes"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties the product needs beyond the lab.
func productProperties() []property {
	return []property{
		{"RenewIsGuarded", renewIsGuarded},
		{"ReleaseIsGuarded", releaseIsGuarded},
		{"FailIsGuarded", failIsGuarded},
		{"ProgressIsGuardedAndReachesTheNextAttempt", progressIsGuarded},
		{"StepsAreGuardedAndReachTheNextAttempts", stepsAreGuarded},
		{"UniqueArgumentsMakeOneEvent", uniqueArgumentsMakeOneEvent},
		{"BatchedOutcomesReportEachClaim", batchedOutcomesReportEachClaim},
		{"ConcurrentClaimersNeverShareAClaim", concurrentClaimersNeverShareAClaim},
		{"AbandonedLastAttemptFails", abandonedLastAttemptFails},
		{"RetryOnLastAttemptFails", retryOnLastAttemptFails},
		{"SchemaRejectsInProgressWithoutLease", schemaRejectsInProgressWithoutLease},
		{"RequeueKeepsGenerationGrowing", requeueKeepsGenerationGrowing},
		{"DuplicateEventIsRejected", duplicateEventIsRejected},
		{"EnqueueRollsBackWithTransaction", enqueueRollsBackWithTransaction},
		{"NotifyOnCommit", notifyOnCommit},
		{"ErrorsAreClassified", errorsAreClassified},
		{"DriverNameIsAShortWord", driverNameIsAShortWord},
	}
}

// Renew extends a live lease, and is refused to a stale generation, an
// expired lease and a finished row.
func renewIsGuarded(e *env) {
	e.enqueueN(3)
	claims := e.claim(3)
	if len(claims) != 3 {
		e.t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	live, stale, expired := claims[0], claims[1], claims[2]

	renewed, err := e.store.Write(e.ctx, lease.Renew(live.Ref(), 2*testLease))
	wantOK(e.t, "renew", err)
	until := renewed.LeaseUntil
	if !until.After(live.LeaseUntil) {
		e.t.Fatalf("renewed deadline %v is not after the claimed one %v", until, live.LeaseUntil)
	}
	if r := e.row(live.ID); !r.LeaseUntil.Equal(until) {
		e.t.Fatalf("row lease_until %v, renew returned %v", r.LeaseUntil, until)
	}

	newer := e.newerGeneration(stale.ID)
	before := e.row(stale.ID)
	err = e.write(lease.Renew(stale.Ref(), 2*testLease))
	wantLost(e.t, "renew by a stale generation", err)
	if after := e.row(stale.ID); !after.LeaseUntil.Equal(*before.LeaseUntil) || after.Generation != newer.Generation {
		e.t.Fatalf("stale renew changed the row: %+v -> %+v", before, after)
	}

	e.expire(expired.ID) // fixture: the lease ran out
	err = e.write(lease.Renew(expired.Ref(), testLease))
	wantLost(e.t, "renew of an expired lease", err)
	if r := e.row(expired.ID); !r.LeaseUntil.Before(time.Now().Add(time.Minute)) {
		e.t.Fatalf("expired lease was renewed to %v", r.LeaseUntil)
	}

	wantOK(e.t, "complete", e.write(lease.Complete(live.Ref())))
	err = e.write(lease.Renew(live.Ref(), testLease))
	wantLost(e.t, "renew of a DONE row", err)
	e.wantState(live.ID, leasework.StatusDone, e.gen(1))
}

// Release gives the claim back at once (READY, no lease, its attempt
// returned), and only for the current owner.
func releaseIsGuarded(e *env) {
	e.enqueueN(2)
	claims := e.claim(2)
	if len(claims) != 2 {
		e.t.Fatalf("claimed %d rows, want 2", len(claims))
	}
	mine, stale := claims[0], claims[1]
	wantOK(e.t, "release", e.write(lease.Release(mine.Ref())))
	if r := e.wantState(mine.ID, leasework.StatusReady, e.gen(1)); r.Attempt != 0 || r.LeaseUntil != nil {
		e.t.Fatalf("released row: attempt %d lease %v; want 0 and none", r.Attempt, r.LeaseUntil)
	}
	// Released twice by the same claim: the second is already recorded,
	// and gives nothing back again.
	wantOK(e.t, "second release", e.write(lease.Release(mine.Ref())))
	if r := e.wantState(mine.ID, leasework.StatusReady, e.gen(1)); r.Attempt != 0 {
		e.t.Fatalf("released twice: attempt %d, want 0", r.Attempt)
	}

	newer := e.newerGeneration(stale.ID)
	wantLost(e.t, "release by a stale generation", e.write(lease.Release(stale.Ref())))
	e.wantState(stale.ID, leasework.StatusInProgress, newer.Generation)

	again := e.claimOne()
	if again.ID != mine.ID || again.Generation != e.gen(2) || again.Attempt != 1 {
		e.t.Fatalf("claim after release = %+v; want row %d generation %d attempt 1", again, mine.ID, e.gen(2))
	}
}

// Fail ends the row FAILED with the reason, only for the current owner.
func failIsGuarded(e *env) {
	e.enqueueN(1)
	old := e.claimOne()
	newer := e.newerGeneration(old.ID)
	wantLost(e.t, "stale fail", e.write(lease.Fail(old.Ref(), "stale")))
	e.wantState(old.ID, leasework.StatusInProgress, newer.Generation)
	wantOK(e.t, "fail", e.write(lease.Fail(newer, "bad payload")))
	r := e.wantState(old.ID, leasework.StatusFailed, newer.Generation)
	if r.LastError != "bad payload" || r.FinishedAt == nil {
		e.t.Fatalf("failed row: last_error %q finished_at %v", r.LastError, r.FinishedAt)
	}
	if more := e.claim(1); len(more) != 0 {
		e.t.Fatalf("a FAILED row was claimed: %+v", more)
	}
}

// Progress is written under the guard, and the next attempt, after a crash,
// receives it.
func progressIsGuarded(e *env) {
	e.enqueueN(1)
	first := e.claimOne()
	if first.Progress != nil {
		e.t.Fatalf("first attempt has progress %q", first.Progress)
	}
	wantOK(e.t, "progress", e.write(lease.Progress(first.Ref(), []byte("page=7"))))
	e.expire(first.ID) // fixture: the worker died
	wantLost(e.t, "progress after expiry", e.write(lease.Progress(first.Ref(), []byte("page=8"))))
	second := e.claimOne()
	if second.Generation != e.gen(2) || !bytes.Equal(second.Progress, []byte("page=7")) {
		e.t.Fatalf("second attempt: generation %d progress %q; want %d and page=7", second.Generation, second.Progress, e.gen(2))
	}
	wantLost(e.t, "progress by the first owner", e.write(lease.Progress(first.Ref(), []byte("page=9"))))
	if r := e.row(first.ID); string(r.Progress) != "page=7" {
		e.t.Fatalf("progress is %q after stale writes, want page=7", r.Progress)
	}
}

// Steps and outputs are written under the guard, in a statement of their
// own or in the caller's transaction, and the next attempt, after a crash,
// receives every step recorded (any bytes, NUL included) and none of a
// stale owner's; a step recorded in a transaction that rolls back is not
// there.
func stepsAreGuarded(e *env) {
	e.enqueueN(1)
	first := e.claimOne()
	if first.Steps != nil {
		e.t.Fatalf("first attempt has steps %q", first.Steps)
	}
	binary := []byte{0, 1, 2, 0xff, '"', '\\', 0}
	wantOK(e.t, "step", e.write(lease.Step(first.Ref(), "reserve", []byte(`{"sku":"x"}`))))
	wantOK(e.t, "step of binary bytes", e.write(lease.Step(first.Ref(), "raw", binary)))
	wantOK(e.t, "output", e.write(lease.Output(first.Ref(), binary)))
	for _, commit := range []bool{false, true} {
		tx, err := e.db.BeginTx(e.ctx, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		name := fmt.Sprintf("in tx, committed %v", commit)
		wantOK(e.t, "step "+name, e.store.WriteTx(e.ctx, tx, lease.Step(first.Ref(), name, []byte(name))))
		if commit {
			wantOK(e.t, "commit of the step's transaction", tx.Commit())
		} else if err := tx.Rollback(); err != nil {
			e.t.Fatal(err)
		}
	}
	e.expire(first.ID) // fixture: the worker died
	wantLost(e.t, "step after expiry", e.write(lease.Step(first.Ref(), "late", []byte("x"))))
	second := e.claimOne()
	want := map[string][]byte{"reserve": []byte(`{"sku":"x"}`), "raw": binary, "in tx, committed true": []byte("in tx, committed true")}
	if second.Generation != e.gen(2) || len(second.Steps) != len(want) {
		e.t.Fatalf("second attempt: generation %d steps %q; want %d and %q", second.Generation, second.Steps, e.gen(2), want)
	}
	for name, v := range want {
		if !bytes.Equal(second.Steps[name], v) {
			e.t.Fatalf("second attempt's step %q = %q; want %q", name, second.Steps[name], v)
		}
	}
	wantLost(e.t, "step by the first owner", e.write(lease.Step(first.Ref(), "reserve", []byte("stale"))))
	wantLost(e.t, "output by the first owner", e.write(lease.Output(first.Ref(), []byte("stale"))))
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	wantLost(e.t, "step in a transaction by the first owner", e.store.WriteTx(e.ctx, tx, lease.Step(first.Ref(), "reserve", []byte("stale"))))
	tx.Rollback()
	r := e.row(first.ID)
	if !bytes.Equal(r.Output, binary) || len(r.Steps) != len(want) {
		e.t.Fatalf("row after stale writes: output %q, steps %+v; want the first attempt's", r.Output, r.Steps)
	}
	for _, st := range r.Steps {
		if st.Generation != first.Generation || !bytes.Equal(st.Value, want[st.Name]) {
			e.t.Fatalf("row's step %+v after stale writes; want %q of generation %d", st, want[st.Name], first.Generation)
		}
	}
}

// Concurrent enqueues of the same unique arguments (lease.Unique), each
// in its own transaction, make one row; the others get a duplicate result
// (Enqueued.Duplicate when skipping duplicates, ErrDuplicateEvent when
// not); other arguments make a row of their own.
func uniqueArgumentsMakeOneEvent(e *env) {
	const producers = 8
	unique := &lease.Unique{ByArgs: true, ArgKeys: []string{"order"}}
	type result struct {
		out lease.Enqueued
		err error
	}
	results := make([]result, producers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tx, err := e.db.BeginTx(e.ctx, nil)
			if err != nil {
				results[i].err = err
				return
			}
			defer tx.Rollback()
			payload := fmt.Sprintf(`{"order":42,"try":%d}`, i)
			out, err := e.store.EnqueueWith(e.ctx, tx, lease.EnqueueOptions{SkipDuplicates: i%2 == 0},
				lease.Event{Kind: "k", Payload: []byte(payload), Unique: unique})
			if err == nil {
				results[i].out, err = out[0], tx.Commit()
			}
			results[i].err = err
		}()
	}
	close(start)
	wg.Wait()
	made := 0
	for i, r := range results {
		switch {
		case r.err == nil && !r.out.Duplicate:
			made++
		case r.err == nil && r.out.Duplicate && i%2 == 0:
		case errors.Is(r.err, leasework.ErrDuplicateEvent) && i%2 == 1:
		default:
			e.t.Fatalf("producer %d: %+v, %v; want the event, a duplicate, or ErrDuplicateEvent", i, r.out, r.err)
		}
	}
	if made != 1 {
		e.t.Fatalf("%d producers made the event; want one", made)
	}
	other := e.enqueue(lease.Event{Kind: "k", Payload: []byte(`{"order":43}`), Unique: unique})
	if other[0].Duplicate || other[0].ID == 0 {
		e.t.Fatalf("another order: %+v; want a new event", other[0])
	}
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.fix.QualifiedTable()).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	if n != 2 {
		e.t.Fatalf("%d rows; want 2, one per order", n)
	}
}

// A batched write reports each claim: the live ones accepted, the stale one
// rejected, in the order given.
func batchedOutcomesReportEachClaim(e *env) {
	e.enqueueN(3)
	claims := e.claim(3)
	if len(claims) != 3 {
		e.t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	newer := e.newerGeneration(claims[1].ID)
	refs := []leasework.Ref{claims[0].Ref(), claims[1].Ref(), claims[2].Ref()}
	res, err := e.store.WriteMany(e.ctx, completes(refs)...)
	wantOK(e.t, "complete many", answered(res, err))
	if len(res) != 3 || res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, leasework.ErrLeaseLost) {
		e.t.Fatalf("results = %+v; want accepted, lost, accepted", res)
	}
	for i, r := range res {
		if r.Ref != refs[i] {
			e.t.Fatalf("result %d is for %+v, want %+v", i, r.Ref, refs[i])
		}
	}
	e.wantState(claims[0].ID, leasework.StatusDone, e.gen(1))
	e.wantState(claims[1].ID, leasework.StatusInProgress, newer.Generation)
	e.wantState(claims[2].ID, leasework.StatusDone, e.gen(1))
}

// Many claimers over many rounds, with abandoned claims expired between
// rounds: no (id, generation) is handed out twice, no row is lost, and every
// row ends DONE with a generation equal to the times it was claimed.
func concurrentClaimersNeverShareAClaim(e *env) {
	const rows, workers = 300, 8
	events := make([]lease.Event, rows)
	for i := range events {
		events[i] = lease.Event{Kind: "k", EventID: fmt.Sprintf("event-%04d", i)}
	}
	e.enqueue(events...)

	var mu sync.Mutex
	seen := map[leasework.Ref]bool{}
	claimsPerRow := map[int64]int64{}
	var dup []leasework.Ref
	for round := 1; ; round++ {
		if round > 20 {
			e.t.Fatal("rows still unfinished after 20 rounds")
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for n := 0; ; n++ {
					got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1 + (w+n)%5, Lease: testLease})
					if err != nil {
						errs <- err
						return
					}
					if len(got) == 0 {
						return
					}
					var done []leasework.Ref
					mu.Lock()
					for _, c := range got {
						if seen[c.Ref()] {
							dup = append(dup, c.Ref())
						}
						seen[c.Ref()] = true
						claimsPerRow[c.ID]++
						// Abandon about one claim in seven, as a crashed worker would.
						if (c.ID+int64(round))%7 != 0 {
							done = append(done, c.Ref())
						}
					}
					mu.Unlock()
					res, err := e.store.WriteMany(e.ctx, completes(done)...)
					if err := answered(res, err); err != nil {
						errs <- err
						return
					}
					for _, r := range res {
						if r.Err != nil {
							errs <- fmt.Errorf("live claim rejected: %w", r.Err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		n, err := leasetest.ExpireAllLeases(e.ctx, e.fix) // fixture: the abandoned claims' leases run out
		wantOK(e.t, "expire", err)
		if n == 0 {
			break
		}
	}
	if len(dup) > 0 {
		e.t.Fatalf("claims handed out twice: %v", dup)
	}
	list, err := e.fix.List(e.ctx, lease.ListRequest{Limit: rows + 1})
	wantOK(e.t, "list", err)
	if len(list) != rows {
		e.t.Fatalf("%d rows in the table, want %d", len(list), rows)
	}
	for _, r := range list {
		if r.Status != leasework.StatusDone || r.Generation != e.gen(claimsPerRow[r.ID]) {
			e.t.Fatalf("row %d: %s generation %d after %d claims; want DONE at generation %d", r.ID, r.Status, r.Generation, claimsPerRow[r.ID], e.gen(claimsPerRow[r.ID]))
		}
	}
}

// A crash on every attempt cannot bypass the budget: when the lease of the
// last allowed attempt expires, the row becomes FAILED with a reason and is
// not claimed again.
func abandonedLastAttemptFails(e *env) {
	ev := e.enqueue(lease.Event{Kind: "k", EventID: "event-001", MaxAttempts: 3})[0]
	for attempt := 1; attempt <= 3; attempt++ {
		c := e.claimOne()
		if c.ID != ev.ID || c.Attempt != attempt || c.Generation != e.gen(int64(attempt)) || c.MaxAttempts != 3 {
			e.t.Fatalf("claim %d = %+v; want row %d attempt %d of 3 at generation %d", attempt, c, ev.ID, attempt, e.gen(int64(attempt)))
		}
		e.expire(c.ID) // fixture: the worker died holding it
	}
	if got := e.claim(1); len(got) != 0 {
		e.t.Fatalf("claimed after the last attempt expired: %+v", got)
	}
	r := e.wantState(ev.ID, leasework.StatusFailed, e.gen(3))
	if r.LastError != "lease expired on attempt 3 of 3" || r.Attempt != 3 {
		e.t.Fatalf("failed row: attempt %d last_error %q; want 3 and \"lease expired on attempt 3 of 3\"", r.Attempt, r.LastError)
	}
}

// A retry on the last allowed attempt ends FAILED with the error.
func retryOnLastAttemptFails(e *env) {
	ev := e.enqueue(lease.Event{Kind: "k", MaxAttempts: 2})[0]
	c := e.claimOne()
	res, err := e.store.Write(e.ctx, lease.Retry(c.Ref(), 0, "boom 1"))
	wantOK(e.t, "retry 1", err)
	status := res.Status
	if status != leasework.StatusReady {
		e.t.Fatalf("retry on attempt 1 of 2 left the row %s, want READY", status)
	}
	c = e.claimOne()
	res, err = e.store.Write(e.ctx, lease.Retry(c.Ref(), 0, "boom 2"))
	wantOK(e.t, "retry 2", err)
	status = res.Status
	if status != leasework.StatusFailed {
		e.t.Fatalf("retry on attempt 2 of 2 left the row %s, want FAILED", status)
	}
	if r := e.wantState(ev.ID, leasework.StatusFailed, e.gen(2)); r.LastError != "boom 2" {
		e.t.Fatalf("last_error %q, want boom 2", r.LastError)
	}
}

// The schema itself refuses INPROGRESS without a lease, and a lease on any
// other state.
func schemaRejectsInProgressWithoutLease(e *env) {
	ev := e.enqueueN(1)[0]
	if err := leasetest.ForceState(e.ctx, e.fix, ev.ID, leasework.StatusInProgress, nil); err == nil {
		e.t.Fatal("the table accepted INPROGRESS without lease_until")
	}
	at := time.Now().Add(time.Hour)
	if err := leasetest.ForceState(e.ctx, e.fix, ev.ID, leasework.StatusReady, &at); err == nil {
		e.t.Fatal("the table accepted READY with a lease_until")
	}
	if err := leasetest.ForceState(e.ctx, e.fix, ev.ID, "LIMBO", nil); err == nil {
		e.t.Fatal("the table accepted an unknown status")
	}
	e.wantState(ev.ID, leasework.StatusReady, 0)
}

// Requeue brings a FAILED row back with a higher generation, so an owner from
// before the requeue stays stale.
func requeueKeepsGenerationGrowing(e *env) {
	ev := e.enqueue(lease.Event{Kind: "k", MaxAttempts: 1})[0]
	c := e.claimOne()
	wantOK(e.t, "fail", e.write(lease.Fail(c.Ref(), "broken")))
	ids, err := e.store.Requeue(e.ctx, lease.RequeueRequest{IDs: []int64{ev.ID}})
	wantOK(e.t, "requeue", err)
	if len(ids) != 1 || ids[0] != ev.ID {
		e.t.Fatalf("requeued %v, want [%d]", ids, ev.ID)
	}
	r := e.wantState(ev.ID, leasework.StatusReady, e.gen(2))
	if r.Attempt != 0 || r.FinishedAt != nil {
		e.t.Fatalf("requeued row: attempt %d finished_at %v; want 0 and none", r.Attempt, r.FinishedAt)
	}
	again := e.claimOne()
	if again.ID != ev.ID || again.Generation != e.gen(3) || again.Attempt != 1 {
		e.t.Fatalf("claim after requeue = %+v; want generation %d attempt 1", again, e.gen(3))
	}
	wantLost(e.t, "complete by the owner from before the requeue", e.write(lease.Complete(c.Ref())))
	wantOK(e.t, "complete", e.write(lease.Complete(again.Ref())))
	if ids, err := e.store.Requeue(e.ctx, lease.RequeueRequest{All: true}); err != nil || len(ids) != 0 {
		e.t.Fatalf("requeue all with nothing FAILED = %v, %v; want nothing (DONE stays DONE)", ids, err)
	}
	e.wantState(ev.ID, leasework.StatusDone, e.gen(3))
}

// A duplicate event id is an error, never an overwrite.
func duplicateEventIsRejected(e *env) {
	e.enqueue(lease.Event{Kind: "k", EventID: "event-001", Payload: []byte("first")})
	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	defer tx.Rollback()
	_, err = e.store.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "event-001", Payload: []byte("second")})
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		e.t.Fatalf("duplicate enqueue: err = %v; want ErrDuplicateEvent", err)
	}
	tx.Rollback()
	r, err := e.fix.GetByEventID(e.ctx, "event-001")
	wantOK(e.t, "read", err)
	if string(r.Payload) != "first" {
		e.t.Fatalf("payload %q after duplicate enqueue, want first", r.Payload)
	}
}

// Events written in a transaction that rolls back never become claimable.
func enqueueRollsBackWithTransaction(e *env) {
	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	_, err = e.store.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "event-001"})
	wantOK(e.t, "enqueue", err)
	wantOK(e.t, "rollback", tx.Rollback())
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed rolled-back events: %+v", got)
	}
	if _, err := e.fix.GetByEventID(e.ctx, "event-001"); !errors.Is(err, lease.ErrNotFound) {
		e.t.Fatalf("rolled-back event: %v; want ErrNotFound", err)
	}
}

// A driver that implements leasework.Notifier delivers the enqueue's
// notification, with the kind as payload, once the transaction commits; a
// release and a requeue, which make rows claimable at once, notify too.
func notifyOnCommit(e *env) {
	l := e.listen()
	defer l.Close()
	waitFor := func(what string) {
		for {
			payload, err := l.Wait(e.ctx)
			wantOK(e.t, "wait after "+what, err)
			switch payload {
			case "wake-up":
				return
			case "": // a reconnection: notifications may have been missed; wait on
			default:
				e.t.Fatalf("notification after %s: payload %q, want wake-up", what, payload)
			}
		}
	}
	e.enqueue(lease.Event{Kind: "wake-up", MaxAttempts: 1})
	waitFor("enqueue")
	c := e.claimOne()
	wantOK(e.t, "release", e.write(lease.Release(c.Ref())))
	waitFor("release")
	c = e.claimOne()
	wantOK(e.t, "fail", e.write(lease.Fail(c.Ref(), "x")))
	_, err := e.store.Requeue(e.ctx, lease.RequeueRequest{All: true})
	wantOK(e.t, "requeue", err)
	waitFor("requeue")
}

// The driver tells a unique violation, a serialization failure and a lost
// connection apart (leasework.Classify), so callers know what to retry.
func errorsAreClassified(e *env) {
	drv := e.target.Driver
	ev := e.enqueueN(1)[0]

	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	_, dupErr := e.fix.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "event-001"})
	tx.Rollback()
	if c := leasework.Classify(drv, dupErr); c != leasework.ClassUnique || drv.SQLState(dupErr) != leasework.SQLStateUniqueViolation {
		e.t.Fatalf("duplicate insert %v: classified %v, SQLSTATE %q; want a unique violation", dupErr, c, drv.SQLState(dupErr))
	}

	serErr := leasetest.SerializationFailure(e.ctx, e.fix, ev.ID)
	if c := leasework.Classify(drv, serErr); c != leasework.ClassSerialization || drv.SQLState(serErr) != leasework.SQLStateSerializationFailure {
		e.t.Fatalf("serialization failure %v: classified %v, SQLSTATE %q", serErr, c, drv.SQLState(serErr))
	}
	if drv.IsConnectionError(serErr) {
		e.t.Fatalf("serialization failure %v reported as a connection error", serErr)
	}

	conn, err := e.db.Conn(e.ctx)
	wantOK(e.t, "conn", err)
	_, err = conn.ExecContext(e.ctx, "SET statement_timeout = 20")
	wantOK(e.t, "set statement_timeout", err)
	_, cancelErr := conn.ExecContext(e.ctx, "SELECT pg_sleep(5)")
	conn.Raw(func(any) error { return driver.ErrBadConn }) // not back to the pool with its timeout
	conn.Close()
	if c := leasework.Classify(drv, cancelErr); c != leasework.ClassCanceled || drv.SQLState(cancelErr) != leasework.SQLStateQueryCanceled {
		e.t.Fatalf("statement cancelled by its timeout %v: classified %v, SQLSTATE %q; want %v", cancelErr, c, drv.SQLState(cancelErr), leasework.ClassCanceled)
	}

	lostErr := leasetest.LoseConnection(e.ctx, e.db)
	if c := leasework.Classify(drv, lostErr); c != leasework.ClassConnection {
		e.t.Fatalf("terminated connection %v (%T): classified %v, want %v", lostErr, lostErr, c, leasework.ClassConnection)
	}
	// The driver's own verdict, not only Classify's: a driver that never
	// reports a connection error would pass the check above on the
	// SQLSTATE or the standard library's errors alone.
	if !drv.IsConnectionError(lostErr) {
		e.t.Fatalf("terminated connection %v (%T): IsConnectionError is false", lostErr, lostErr)
	}
	if leasework.Classify(drv, nil) != leasework.ClassNone || leasework.Classify(drv, errors.New("x")) != leasework.ClassOther {
		e.t.Fatal("Classify of nil or a plain error is wrong")
	}
}

// The driver's Name is what logs and test names call it: 1 to 32 ASCII
// letters, digits, '.', '_' or '-' (leasework.Driver.Name), so that it
// never splits a test name (a slash) or a log line's value (a space), and
// the same on every call.
func driverNameIsAShortWord(e *env) {
	name := e.target.Driver.Name()
	if name == "" || len(name) > 32 {
		e.t.Fatalf("Name() = %q: %d bytes; want 1 to 32", name, len(name))
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			e.t.Fatalf("Name() = %q: %q is not an ASCII letter, digit, '.', '_' or '-'", name, c)
		}
	}
	if again := e.target.Driver.Name(); again != name {
		e.t.Fatalf("Name() = %q, then %q; want the same name", name, again)
	}
}
