package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// Properties of batched outcome writes: what one write of many claims does
// to each, and to the writes running beside it.
func batchProperties() []property {
	return []property{
		{"ConcurrentBatchesNeverDeadlock", concurrentBatchesNeverDeadlock},
		{"AnyErrorTextIsStored", anyErrorTextIsStored},
		{"ReplayedOutcomeIsAlreadyRecorded", replayedOutcomeIsAlreadyRecorded},
		{"StaleOrDeletedIsNeverAlreadyRecorded", staleOrDeletedIsNeverAlreadyRecorded},
	}
}

// Batched writes lock their rows in one order (by id), so renewals,
// completions and retries of overlapping claims, each batch given in the
// opposite order of another, never deadlock (SQLSTATE 40P01). Each round
// runs four batches at once over the same fifty claims: renew upward, renew
// downward, complete the lower two thirds downward, retry the upper two
// thirds upward; every claim then has exactly one accepted outcome.
func concurrentBatchesNeverDeadlock(e *env) {
	const rows, rounds = 50, 25
	drv := e.target.Driver
	for round := range rounds {
		events := make([]lease.Event, rows)
		for i := range events {
			events[i] = lease.Event{Kind: "k", EventID: fmt.Sprintf("round-%02d-%03d", round, i)}
		}
		e.enqueue(events...)
		claims := e.claim(rows)
		if len(claims) != rows {
			e.t.Fatalf("round %d: claimed %d rows, want %d", round, len(claims), rows)
		}
		up := make([]leasework.Ref, rows)
		for i, c := range claims {
			up[i] = c.Ref()
		}
		slices.SortFunc(up, func(a, b leasework.Ref) int { return int(a.ID - b.ID) })
		down := slices.Clone(up)
		slices.Reverse(down)
		completions := completes(down[rows/3:]) // the lower two thirds, highest id first
		var retries []lease.Write
		for _, ref := range up[rows/3:] { // the upper two thirds, lowest id first
			retries = append(retries, lease.Retry(ref, time.Hour, "again"))
		}

		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []error
		var completed, retried []lease.Result
		run := func(what string, write func() error) {
			wg.Go(func() {
				<-start
				if err := write(); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Errorf("%s: %w", what, err))
					mu.Unlock()
				}
			})
		}
		renew := func(refs []leasework.Ref) func() error {
			return func() error {
				for range 3 {
					if err := answered(e.store.WriteMany(e.ctx, renewals(refs, testLease)...)); err != nil {
						return err
					}
				}
				return nil
			}
		}
		run("renew upward", renew(up))
		run("renew downward", renew(down))
		run("complete downward", func() (err error) {
			completed, err = e.store.WriteMany(e.ctx, completions...)
			return answered(completed, err)
		})
		run("retry upward", func() (err error) {
			retried, err = e.store.WriteMany(e.ctx, retries...)
			return answered(retried, err)
		})
		close(start)
		wg.Wait()
		for _, err := range failures {
			if drv.SQLState(err) == leasework.SQLStateDeadlockDetected {
				e.t.Errorf("round %d: %v\n(a deadlock: batched writes must lock their rows in id order)", round, err)
			} else {
				e.t.Errorf("round %d: %v", round, err)
			}
		}
		if e.t.Failed() {
			e.t.FailNow()
		}

		accepted := map[int64][]string{}
		for _, r := range completed {
			if r.Err == nil {
				accepted[r.Ref.ID] = append(accepted[r.Ref.ID], "complete")
			}
		}
		for _, r := range retried {
			if r.Err == nil {
				accepted[r.Ref.ID] = append(accepted[r.Ref.ID], "retry")
			}
		}
		for _, ref := range up {
			row := e.row(ref.ID)
			ops := accepted[ref.ID]
			want := map[string]leasework.Status{"complete": leasework.StatusDone, "retry": leasework.StatusReady}
			if len(ops) != 1 || row.Status != want[ops[0]] {
				e.t.Fatalf("round %d: row %d is %s after accepted writes %v; want exactly one, matching the row", round, ref.ID, row.Status, ops)
			}
		}
	}
}

// Any error text can be stored: a batch of retries and one of failures
// (WriteMany of lease.Retry, of lease.Fail) clean every text
// (valid UTF-8, no NUL byte, at most lease.MaxErrorBytes, cut on a character
// boundary), so a text PostgreSQL would refuse never fails the batch it is
// in, and the other claims of the batch are recorded with their own texts.
func anyErrorTextIsStored(e *env) {
	long := strings.Repeat("€", 30000) // 90,000 bytes
	texts := []string{
		"plain error",
		long,
		"nul\x00byte",
		"invalid \xff\xfe utf-8",
		long[:lease.MaxErrorBytes+1], // cut inside a character
		"",
	}
	check := func(what string, ids []int64, statuses []leasework.Status) {
		e.t.Helper()
		for i, id := range ids {
			r := e.row(id)
			got, in := r.LastError, texts[i]
			if r.Status != statuses[i] {
				e.t.Errorf("%s: row %d is %s, want %s", what, id, r.Status, statuses[i])
			}
			if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || len(got) > lease.MaxErrorBytes {
				e.t.Errorf("%s: text %d stored as %d bytes, valid UTF-8 %v, NUL at %d; want valid UTF-8, no NUL, at most %d bytes",
					what, i, len(got), utf8.ValidString(got), strings.IndexByte(got, 0), lease.MaxErrorBytes)
			}
			switch {
			case in == "nul\x00byte":
				if got != "nul\uFFFDbyte" {
					e.t.Errorf("%s: %q stored as %q; want the NUL replaced by U+FFFD", what, in, got)
				}
			case len(in) > lease.MaxErrorBytes:
				if !strings.HasSuffix(got, "…") || !strings.HasPrefix(in, strings.TrimSuffix(got, "…")) || len(got) < lease.MaxErrorBytes-8 {
					e.t.Errorf("%s: a %d-byte text stored as %d bytes ending %q; want its start, cut on a character boundary, ending with …",
						what, len(in), len(got), got[max(0, len(got)-12):])
				}
			case utf8.ValidString(in):
				if got != in {
					e.t.Errorf("%s: %q stored as %q; want it unchanged", what, in, got)
				}
			}
		}
	}

	e.enqueueN(2 * len(texts))
	claims := e.claim(2 * len(texts))
	if len(claims) != 2*len(texts) {
		e.t.Fatalf("claimed %d rows, want %d", len(claims), 2*len(texts))
	}
	var retries, fails []lease.Write
	var retryIDs, failIDs []int64
	var ready, failed []leasework.Status
	for i, text := range texts {
		retries = append(retries, lease.Retry(claims[i].Ref(), time.Hour, text))
		retryIDs, ready = append(retryIDs, claims[i].ID), append(ready, leasework.StatusReady)
		c := claims[len(texts)+i]
		fails = append(fails, lease.Fail(c.Ref(), text))
		failIDs, failed = append(failIDs, c.ID), append(failed, leasework.StatusFailed)
	}
	res, err := e.store.WriteMany(e.ctx, retries...)
	wantOK(e.t, "retry many with odd texts", answered(res, err))
	for i, r := range res {
		wantOK(e.t, fmt.Sprintf("retry %d", i), r.Err)
	}
	check("retry", retryIDs, ready)
	res, err = e.store.WriteMany(e.ctx, fails...)
	wantOK(e.t, "fail many with odd texts", answered(res, err))
	for i, r := range res {
		wantOK(e.t, fmt.Sprintf("fail %d", i), r.Err)
	}
	check("fail", failIDs, failed)
}

// An outcome written twice by the same claim — its first try committed but
// its reply was lost — reports the second try as recorded
// (lease.VerdictRecorded), with no
// error and the row's status, and changes nothing: a completion (DONE), a
// retry (READY, or FAILED on the last attempt), a failure (FAILED) and a
// release (READY, its attempt given back once). A renewal is never already
// recorded.
func replayedOutcomeIsAlreadyRecorded(e *env) {
	e.enqueue(
		lease.Event{Kind: "k", EventID: "complete"},
		lease.Event{Kind: "k", EventID: "retry"},
		lease.Event{Kind: "k", EventID: "retry-last", MaxAttempts: 1},
		lease.Event{Kind: "k", EventID: "fail"},
		lease.Event{Kind: "k", EventID: "release"},
	)
	claims := map[string]leasework.Claim{}
	for _, c := range e.claim(5) {
		claims[c.EventID] = c
	}
	if len(claims) != 5 {
		e.t.Fatalf("claimed %v, want the five events", claims)
	}
	complete, retry, retryLast, fail, release := claims["complete"], claims["retry"], claims["retry-last"], claims["fail"], claims["release"]

	writes := []struct {
		name  string
		id    int64
		write func() ([]lease.Result, error)
		want  leasework.Status
	}{
		{"complete", complete.ID, func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Complete(complete.Ref()))
		}, leasework.StatusDone},
		{"retry", retry.ID, func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Retry(retry.Ref(), time.Hour, "nul\x00byte"))
		}, leasework.StatusReady},
		{"retry on the last attempt", retryLast.ID, func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Retry(retryLast.Ref(), 0, "out of attempts"))
		}, leasework.StatusFailed},
		{"fail", fail.ID, func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Fail(fail.Ref(), "bad payload"))
		}, leasework.StatusFailed},
		{"release", release.ID, func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Release(release.Ref()))
		}, leasework.StatusReady},
	}
	for _, w := range writes {
		first, err := w.write()
		wantOK(e.t, w.name, answered(first, err))
		if first[0].Err != nil || first[0].Verdict == lease.VerdictRecorded || first[0].Status != w.want {
			e.t.Fatalf("%s: first write = %+v; want accepted, %s, not already recorded", w.name, first[0], w.want)
		}
		before := e.row(w.id)
		second, err := w.write()
		wantOK(e.t, w.name+" again", answered(second, err))
		if second[0].Err != nil || second[0].Verdict != lease.VerdictRecorded || second[0].Status != w.want {
			e.t.Fatalf("%s written twice: second write = %+v; want VerdictRecorded, no error, status %s", w.name, second[0], w.want)
		}
		if after := e.row(w.id); after.Status != before.Status || after.Generation != before.Generation ||
			after.Attempt != before.Attempt || after.LastError != before.LastError || !after.UpdatedAt.Equal(before.UpdatedAt) {
			e.t.Fatalf("%s written twice: the second write changed the row:\n%+v\n%+v", w.name, before, after)
		}
	}
	if r := e.row(release.ID); r.Attempt != 0 {
		e.t.Fatalf("released twice: attempt %d; want 0 (given back once)", r.Attempt)
	}

	// The single-claim forms report a replay as success.
	wantOK(e.t, "Complete again", e.write(lease.Complete(complete.Ref())))
	wantOK(e.t, "Release again", e.write(lease.Release(release.Ref())))
	wantOK(e.t, "Fail again", e.write(lease.Fail(fail.Ref(), "bad payload")))
	again, err := e.store.Write(e.ctx, lease.Retry(retry.Ref(), time.Hour, "nul\x00byte"))
	if status := again.Status; err != nil || status != leasework.StatusReady {
		e.t.Fatalf("Retry again = %s, %v; want READY, nil", status, err)
	}

	// A renewal of a finished claim is lost, never already recorded.
	res, err := e.store.WriteMany(e.ctx, lease.Renew(complete.Ref(), testLease))
	wantOK(e.t, "renew many", answered(res, err))
	if !errors.Is(res[0].Err, leasework.ErrLeaseLost) || res[0].Verdict == lease.VerdictRecorded || res[0].Verdict == lease.VerdictGone {
		e.t.Fatalf("renew of a completed claim = %+v; want ErrLeaseLost only", res[0])
	}
	// A write that is not the one recorded is lost: a retry of the
	// completed claim, a completion of the failed one.
	res, err = e.store.WriteMany(e.ctx, lease.Retry(complete.Ref(), 0, "late"))
	wantOK(e.t, "retry many", answered(res, err))
	if !errors.Is(res[0].Err, leasework.ErrLeaseLost) || res[0].Verdict == lease.VerdictRecorded {
		e.t.Fatalf("retry of a completed claim = %+v; want ErrLeaseLost", res[0])
	}
	res, err = e.store.WriteMany(e.ctx, lease.Complete(fail.Ref()))
	wantOK(e.t, "complete many", answered(res, err))
	if !errors.Is(res[0].Err, leasework.ErrLeaseLost) || res[0].Verdict == lease.VerdictRecorded {
		e.t.Fatalf("completion of a failed claim = %+v; want ErrLeaseLost", res[0])
	}
}

// A stale owner is never told its write is already recorded
// (lease.VerdictRecorded): not when a
// newer generation holds the row or finished it with the same outcome, not
// when its own lease expired and the claim statement failed the row on its
// last attempt. A row that no longer exists is gone (lease.VerdictGone),
// and still ErrLeaseLost.
func staleOrDeletedIsNeverAlreadyRecorded(e *env) {
	evs := e.enqueueN(2)
	last := e.enqueue(lease.Event{Kind: "k", EventID: "last", MaxAttempts: 1})[0]
	claims := e.claim(3)
	if len(claims) != 3 {
		e.t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	byID := map[int64]leasework.Claim{}
	for _, c := range claims {
		byID[c.ID] = c
	}
	stale, deleted, expired := byID[evs[0].ID], byID[evs[1].ID], byID[last.ID]

	notRecorded := func(what string, res []lease.Result, err error) lease.Result {
		e.t.Helper()
		wantOK(e.t, what, answered(res, err))
		if !errors.Is(res[0].Err, leasework.ErrLeaseLost) || res[0].Verdict == lease.VerdictRecorded {
			e.t.Fatalf("%s = %+v; want ErrLeaseLost and not VerdictRecorded", what, res[0])
		}
		return res[0]
	}

	// A newer generation holds the row, then completes it.
	newer := e.newerGeneration(stale.ID)
	res, err := e.store.WriteMany(e.ctx, lease.Complete(stale.Ref()))
	notRecorded("stale completion while the newer claim runs", res, err)
	wantOK(e.t, "newer completion", e.write(lease.Complete(newer)))
	res, err = e.store.WriteMany(e.ctx, lease.Complete(stale.Ref()))
	notRecorded("stale completion after the newer claim completed", res, err)
	e.wantState(stale.ID, leasework.StatusDone, newer.Generation)

	// The lease of the last attempt expired, and a claim failed the row at
	// the same generation: the owner's late retry did not happen.
	e.expire(expired.ID) // fixture: the owner stalled
	if got := e.claim(1); len(got) != 0 {
		e.t.Fatalf("claimed %+v; want nothing (the expired last attempt fails instead)", got)
	}
	e.wantState(expired.ID, leasework.StatusFailed, expired.Generation)
	res, err = e.store.WriteMany(e.ctx, lease.Retry(expired.Ref(), 0, "too late"))
	notRecorded("retry after the expired last attempt was failed", res, err)
	res, err = e.store.WriteMany(e.ctx, lease.Fail(expired.Ref(), "too late"))
	notRecorded("fail after the expired last attempt was failed", res, err)

	// A deleted row is gone, whatever the write.
	res, err = e.store.WriteMany(e.ctx, lease.CompleteAndDelete(deleted.Ref()))
	wantOK(e.t, "complete and delete", answered(res, err))
	if res[0].Err != nil || res[0].Status != leasework.StatusDone {
		e.t.Fatalf("complete and delete = %+v; want accepted", res[0])
	}
	for name, write := range map[string]func() ([]lease.Result, error){
		"complete and delete": func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.CompleteAndDelete(deleted.Ref()))
		},
		"complete": func() ([]lease.Result, error) { return e.store.WriteMany(e.ctx, lease.Complete(deleted.Ref())) },
		"renew": func() ([]lease.Result, error) {
			return e.store.WriteMany(e.ctx, lease.Renew(deleted.Ref(), testLease))
		},
		"release": func() ([]lease.Result, error) { return e.store.WriteMany(e.ctx, lease.Release(deleted.Ref())) },
	} {
		res, err := write()
		if r := notRecorded(name+" of a deleted row", res, err); r.Verdict != lease.VerdictGone {
			e.t.Fatalf("%s of a deleted row = %+v; want VerdictGone", name, r)
		}
	}
}
