package framework

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/tune"
	"github.com/leasework/leasework/lease"
)

// outcome is what to write for one finished attempt.
type outcome struct {
	a     *attempt
	write lease.Write
	tries int  // failed writes so far
	alone bool // written on its own: a batch it was in failed for another reason than the connection
	// commitUnknown: the handler's transaction completed the claim, but its
	// COMMIT failed; the row shows whether it committed.
	commitUnknown bool
}

func (o outcome) op() lease.Op { return o.write.Op() }

// maxAloneTries bounds the writes of one outcome written on its own that
// fail for another reason than the connection (a value the database
// refuses): such a failure will most likely happen again.
const maxAloneTries = 3

// outcomeQueue passes handler results to the outcome writer. Pushing never
// blocks, so no handler ever waits behind a write, however stuck.
type outcomeQueue struct {
	mu       sync.Mutex
	items    []outcome
	closed   bool
	deadline time.Time     // set by close: the last instant to write
	ready    chan struct{} // capacity 1: something was pushed, or the queue closed
}

func newOutcomeQueue() *outcomeQueue {
	return &outcomeQueue{ready: make(chan struct{}, 1)}
}

// push queues o. It reports false, and drops o, once the queue is closed.
func (q *outcomeQueue) push(o outcome) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, o)
	q.mu.Unlock()
	signal(q.ready)
	return true
}

// close makes the writer write what is queued by deadline, then return.
func (q *outcomeQueue) close(deadline time.Time) {
	q.mu.Lock()
	q.closed, q.deadline = true, deadline
	q.mu.Unlock()
	signal(q.ready)
}

// take removes and returns everything queued, and whether the queue is
// closed (and until when to write).
func (q *outcomeQueue) take() (items []outcome, closed bool, deadline time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, q.items = q.items, nil
	return items, q.closed, q.deadline
}

func (q *outcomeQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// writeOutcomes writes handler results until the queue is closed and
// everything in it is written or abandoned.
//
// It batches like a group commit: an outcome arriving at an idle writer is
// written at once, and those arriving while a write is in flight go out
// together in the next one, one statement per kind of outcome. Under load
// that is one round trip per batch, with no timer adding latency.
func (w *Worker) writeOutcomes() {
	var pending []outcome
	retryWait := &backoff.ExponentialBackOff{
		InitialInterval: 10 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: time.Second, Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	retryWait.Reset()
	for {
		items, closed, deadline := w.outcomes.take()
		pending = append(pending, items...)
		if len(pending) == 0 {
			if closed {
				return
			}
			<-w.outcomes.ready
			continue
		}
		if closed && !time.Now().Before(deadline) {
			for _, o := range pending {
				w.abandon(o, "the worker's stop timeout passed", nil)
			}
			return
		}
		if !closed {
			deadline = time.Time{}
		}
		pending = w.flushTakingTurns(pending, deadline)
		if len(pending) == 0 {
			retryWait.Reset()
			continue
		}
		// Some writes failed: wait before trying again, taking in new
		// outcomes meanwhile.
		w.pause(retryWait.NextBackOff())
	}
}

// pause waits d, or less when the queue closes with an earlier deadline.
func (w *Worker) pause(d time.Duration) {
	until := time.Now().Add(d)
	for {
		w.outcomes.mu.Lock()
		if w.outcomes.closed && w.outcomes.deadline.Before(until) {
			until = w.outcomes.deadline
		}
		w.outcomes.mu.Unlock()
		left := time.Until(until)
		if left <= 0 {
			return
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			return
		case <-w.outcomes.ready:
			t.Stop()
		}
	}
}

// flush writes pending outcomes in one call to the store, which sends one
// statement per op, and returns those to try again. The writes of a
// statement that fails because of the connection (or a timeout) are tried
// again as they were. Those of a statement that fails for any other reason
// are written again claim by claim, so that one value the database
// refuses never holds back the others. deadline, when not zero, bounds
// every statement (the end of a stop).
func (w *Worker) flush(pending []outcome, deadline time.Time) []outcome {
	var batch, alone, again []outcome
	for _, o := range pending {
		if o.alone {
			alone = append(alone, o)
		} else {
			batch = append(batch, o)
		}
	}
	perOp := map[lease.Op]int{}
	for _, o := range batch {
		perOp[o.op()]++
	}
	failed := map[lease.Op]bool{}
	for i, r := range w.write(batch, deadline) {
		o := batch[i]
		if r.Verdict != lease.VerdictNoAnswer {
			w.recorded(o, r)
			continue
		}
		transient := w.transient(r.Err)
		if !failed[o.op()] {
			failed[o.op()] = true
			w.count.outcomeWriteErrors.Add(1)
			switch {
			case transient:
				w.log.Warn("outcome write failed; will try again", "op", o.op(), "claims", perOp[o.op()], "err", r.Err)
			case perOp[o.op()] > 1:
				w.log.Warn("outcome write failed; writing its claims one by one", "op", o.op(), "claims", perOp[o.op()], "err", r.Err)
			}
		}
		switch {
		case transient:
			again = append(again, w.keepForRetry([]outcome{o}, r.Err)...)
		case perOp[o.op()] == 1:
			again = append(again, w.failedAlone(o, r.Err)...)
		default:
			alone = append(alone, o)
		}
	}
	for _, o := range alone {
		r := w.write([]outcome{o}, deadline)[0]
		switch {
		case r.Verdict != lease.VerdictNoAnswer:
			w.recorded(o, r)
		case w.transient(r.Err):
			w.count.outcomeWriteErrors.Add(1)
			again = append(again, w.keepForRetry([]outcome{o}, r.Err)...)
		default:
			w.count.outcomeWriteErrors.Add(1)
			again = append(again, w.failedAlone(o, r.Err)...)
		}
	}
	return again
}

// defaultSplitFrom is the size from which a batch whose completions take
// their keys' turns is written as two statements at once.
const defaultSplitFrom = 128

// The chaos soak's workers split from fewer outcomes (internal/tune): with
// a dozen slots they never gather defaultSplitFrom.
func init() {
	tune.SplitFrom = func(w any, n int, split func(outcomes int)) {
		wk := w.(*Worker)
		wk.splitFrom, wk.splitWrite = max(n, 2), split
	}
}

// flushTakingTurns is flush, in two halves written side by side when the
// batch's completions will take turns (see writeTakingTurns) and it holds
// at least defaultSplitFrom outcomes (the worker's splitFrom, when set).
// Such a statement is also the claim of the next events of its keys, so
// the claim loop's connection has nothing to do while it runs: two
// statements keep two of the server's backends busy as the claim loop and
// the writer do for keyless work. The halves hold different claims and so
// different keys (a key has one live event), and each statement takes its
// keys' locks in key order, so neither waits for the other.
func (w *Worker) flushTakingTurns(pending []outcome, deadline time.Time) []outcome {
	from := w.splitFrom
	if from == 0 {
		from = defaultSplitFrom
	}
	if len(pending) < from || w.turnsQueue(pending) == nil {
		return w.flush(pending, deadline)
	}
	if f := w.splitWrite; f != nil {
		f(len(pending))
	}
	half := len(pending) / 2
	var first []outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		first = w.flush(pending[:half], deadline)
	}()
	second := w.flush(pending[half:], deadline)
	<-done
	return append(first, second...)
}

// transient reports whether a write failed for a reason that says nothing
// about the values written: a lost or timed-out connection, a statement
// cancelled by its timeout, a serialization failure or deadlock.
func (w *Worker) transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch leasework.Classify(w.store.Driver(), err) {
	case leasework.ClassConnection, leasework.ClassSerialization, leasework.ClassCanceled:
		return true
	}
	return false
}

// write passes a batch of outcomes to the store, each statement bounded
// by the statement timeout, and all of them by deadline when it is not
// zero. Every result is a verdict: a statement that failed gives its
// writes lease.VerdictNoAnswer.
func (w *Worker) write(batch []outcome, deadline time.Time) []lease.Result {
	if len(batch) == 0 {
		return nil
	}
	writes := make([]lease.Write, len(batch))
	ops := map[lease.Op]bool{}
	for i, o := range batch {
		writes[i] = o.write
		ops[o.op()] = true
	}
	ctx, cancel := context.WithTimeout(w.dbCtx, w.cfg.statementTimeout()*time.Duration(len(ops)))
	defer cancel()
	if !deadline.IsZero() {
		var cancelAtDeadline context.CancelFunc
		ctx, cancelAtDeadline = context.WithDeadline(ctx, deadline)
		defer cancelAtDeadline()
	}
	res, err := w.writeTakingTurns(ctx, batch, writes)
	if err != nil {
		// A write no statement can make: the worker made it, so this is
		// a bug; each write is refused on its own.
		res = make([]lease.Result, len(batch))
		for i, o := range batch {
			res[i] = lease.Result{Op: o.op(), Ref: o.a.ref, Verdict: lease.VerdictNoAnswer, Err: err}
		}
	}
	return res
}

// keepForRetry returns the outcomes of a write that failed transiently that
// are still worth writing, and abandons the others.
//
// An outcome is kept for as long as its claim can still be confirmed: until
// the claim's local deadline (its last confirmed lease deadline less the
// margin), which every confirmed renewal moves on, and which the renewal
// loop keeps renewing while the outcome waits (see attempt.renewable). So a
// database that is away for less than that, a restart say, costs a wait and
// no second run; only past it could another worker have claimed the row,
// and the outcome is given up. However many writes fail meanwhile, the
// outcomes waiting stay bounded: they are claims held, at most twice
// Concurrency (see freeSlots), and the writer tries again after a backoff
// of at most a second.
func (w *Worker) keepForRetry(group []outcome, err error) []outcome {
	var keep []outcome
	now := time.Now()
	for _, o := range group {
		o.tries++
		deadline, _, _ := o.a.state()
		if now.Before(deadline) {
			keep = append(keep, o)
			continue
		}
		w.abandon(o, "the database could not be reached before the claim's lease could have expired", err)
	}
	return keep
}

// failedAlone handles the failure of an outcome written on its own for
// another reason than the connection: it is tried again, alone, a few
// times, then abandoned.
func (w *Worker) failedAlone(o outcome, err error) []outcome {
	o.tries++
	o.alone = true
	deadline, _, _ := o.a.state()
	if o.tries < maxAloneTries && time.Now().Before(deadline) {
		w.log.Warn("outcome write failed; will try again", "op", o.op(), "id", o.a.ref.ID,
			"generation", o.a.ref.Generation, "event_id", o.a.claim.EventID, "err", err)
		return []outcome{o}
	}
	w.abandon(o, "the database refused it", err)
	return nil
}

// abandon gives up writing an outcome: the claim's lease expires and
// another worker claims the event again.
func (w *Worker) abandon(o outcome, why string, err error) {
	text := why
	if err != nil {
		text += ": " + err.Error()
	}
	o.a.finish(Settlement{Outcome: OutcomeAbandoned, Error: text, Rerun: o.reruns()})
}

// reruns reports whether the event runs again if o is not written: the
// handler ran to its end (a completion or a failure); a retry, a snooze
// or a release runs it again anyway.
func (o outcome) reruns() bool {
	switch o.op() {
	case lease.OpComplete, lease.OpCompleteAndDelete, lease.OpFail:
		return true
	}
	return false
}

// recorded settles one outcome from the database's verdict on its write.
//
// A write found already recorded (an earlier try committed though its
// reply was lost) is the write's success. So is a row gone when an
// earlier try of this write failed and the answer came before the claim's
// local deadline: while the lease held, nobody else could have taken the
// row, so only that earlier try (a completion that deletes its row, or its
// effect followed by the next claim's) can have made it go.
func (w *Worker) recorded(o outcome, r lease.Result) {
	a := o.a
	deadline, _, _ := a.state()
	leaseHeld := time.Now().Before(deadline)
	if o.commitUnknown && (r.Verdict == lease.VerdictDone || (r.Verdict == lease.VerdictGone && leaseHeld)) {
		// The handler's COMMIT failed, yet the row shows its completion:
		// DONE at the claim's generation, or deleted before the lease
		// could expire (nobody else could have taken the row). It
		// committed; the effect and the completion are both there.
		w.log.Info("the handler's transaction committed though its COMMIT reported an error",
			"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID)
		a.finish(Settlement{Outcome: OutcomeCompleted, InHandlerTx: true})
		return
	}
	replayed := r.Verdict == lease.VerdictRecorded || (r.Verdict == lease.VerdictGone && o.tries > 0 && leaseHeld)
	if r.Err != nil && !replayed {
		a.finish(Settlement{Outcome: OutcomeRejected, Cancelled: r.Verdict == lease.VerdictCancelled})
		return
	}
	s := Settlement{Replayed: replayed, InHandlerTx: o.commitUnknown}
	if a.q.limited.Load() && o.op() != lease.OpRenew && o.op() != lease.OpProgress {
		signal(a.q.wake)
	}
	switch o.op() {
	case lease.OpComplete, lease.OpCompleteAndDelete:
		s.Outcome = OutcomeCompleted
	case lease.OpRelease:
		s.Outcome = OutcomeReleased
	case lease.OpSnooze:
		s.Outcome, s.Delay = OutcomeSnoozed, o.write.Delay()
		w.wakeAfter(a.q, s.Delay)
	case lease.OpRetry:
		s.Outcome, s.Error = OutcomeFailed, o.write.Text()
		if r.Status == leasework.StatusReady || r.Verdict == lease.VerdictGone {
			s.Outcome, s.Delay = OutcomeRetried, o.write.Delay()
			w.wakeAfter(a.q, s.Delay)
		}
	default: // OpFail
		s.Outcome, s.Error = OutcomeFailed, o.write.Text()
	}
	a.finish(s)
}

// forget drops a claim whose outcome is settled.
func (w *Worker) forget(a *attempt) {
	w.mu.Lock()
	if _, held := w.live[a.ref]; held {
		delete(w.live, a.ref)
		a.q.held--
	}
	w.mu.Unlock()
	signal(a.q.slotFreed) // a claim waiting for the outcomes may go on
}
