package framework

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

type op int

const (
	opComplete op = iota
	opRetry
	opFail
	opRelease
	numOps
)

var opNames = [numOps]string{"complete", "retry", "fail", "release"}

// outcome is what to write for one finished attempt.
type outcome struct {
	a      *attempt
	op     op
	delay  time.Duration // opRetry
	snooze bool          // opRetry: leasework.Snooze, not a failure
	text   string        // opRetry, opFail: the error recorded in the row
	tries  int           // failed writes so far
	alone  bool          // written on its own: a batch it was in failed for another reason than the connection
	// commitUnknown: the handler's transaction completed the claim, but its
	// COMMIT failed; the row shows whether it committed.
	commitUnknown bool
}

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
		pending = w.flush(pending, deadline)
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

// flush writes pending outcomes, one statement per kind of outcome, and
// returns those to try again. A batch that fails because of the connection
// (or a timeout) is tried again whole. A batch that fails for any other
// reason is written again claim by claim, so that one value the database
// refuses never holds back the others. deadline, when not zero, bounds
// every statement (the end of a stop).
func (w *Worker) flush(pending []outcome, deadline time.Time) []outcome {
	var groups [numOps][]outcome
	var alone []outcome
	for _, o := range pending {
		if o.alone {
			alone = append(alone, o)
		} else {
			groups[o.op] = append(groups[o.op], o)
		}
	}
	var again []outcome
	for i, group := range groups {
		if len(group) == 0 {
			continue
		}
		res, err := w.writeGroup(op(i), group, deadline)
		if err != nil {
			w.count.outcomeWriteErrors.Add(1)
		}
		switch {
		case err == nil:
			for i, r := range res {
				w.recorded(group[i], r)
			}
		case w.transient(err):
			w.log.Warn("outcome write failed; will try again", "op", opNames[i], "claims", len(group), "err", err)
			again = append(again, w.keepForRetry(group, err)...)
		case len(group) == 1:
			again = append(again, w.failedAlone(group[0], err)...)
		default:
			w.log.Warn("outcome write failed; writing its claims one by one", "op", opNames[i], "claims", len(group), "err", err)
			alone = append(alone, group...)
		}
	}
	for _, o := range alone {
		res, err := w.writeGroup(o.op, []outcome{o}, deadline)
		if err != nil {
			w.count.outcomeWriteErrors.Add(1)
		}
		switch {
		case err == nil:
			w.recorded(o, res[0])
		case w.transient(err):
			again = append(again, w.keepForRetry([]outcome{o}, err)...)
		default:
			again = append(again, w.failedAlone(o, err)...)
		}
	}
	return again
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

func (w *Worker) writeGroup(o op, group []outcome, deadline time.Time) ([]lease.Result, error) {
	ctx, cancel := context.WithTimeout(w.dbCtx, w.cfg.statementTimeout())
	defer cancel()
	if !deadline.IsZero() {
		var cancelAtDeadline context.CancelFunc
		ctx, cancelAtDeadline = context.WithDeadline(ctx, deadline)
		defer cancelAtDeadline()
	}
	s := w.store
	switch o {
	case opComplete:
		refs := refsOf(group)
		if w.cfg.Retention == 0 {
			return s.CompleteAndDeleteMany(ctx, refs)
		}
		return s.CompleteMany(ctx, refs)
	case opRetry:
		reqs := make([]lease.RetryRequest, len(group))
		for i, g := range group {
			reqs[i] = lease.RetryRequest{Ref: g.a.ref, Delay: g.delay, Error: g.text, Snooze: g.snooze}
		}
		return s.RetryMany(ctx, reqs)
	case opFail:
		reqs := make([]lease.FailRequest, len(group))
		for i, g := range group {
			reqs[i] = lease.FailRequest{Ref: g.a.ref, Reason: g.text}
		}
		return s.FailMany(ctx, reqs)
	default:
		return s.ReleaseMany(ctx, refsOf(group))
	}
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
		w.log.Warn("outcome write failed; will try again", "op", opNames[o.op], "id", o.a.ref.ID,
			"generation", o.a.ref.Generation, "event_id", o.a.claim.EventID, "err", err)
		return []outcome{o}
	}
	w.abandon(o, "the database refused it", err)
	return nil
}

// abandon gives up writing an outcome: the claim's lease expires and
// another worker claims the event again.
func (w *Worker) abandon(o outcome, why string, err error) {
	w.count.outcomesAbandoned.Add(1)
	rerun := o.op == opComplete || o.op == opFail
	if rerun {
		w.count.rerunsFromAbandonedOutcomes.Add(1)
	}
	w.log.Error("outcome not recorded; the lease will expire and the event will be claimed again",
		"why", why, "op", opNames[o.op], "id", o.a.ref.ID, "generation", o.a.ref.Generation,
		"event_id", o.a.claim.EventID, "tries", o.tries, "err", err)
	w.forget(o.a)
	text := why
	if err != nil {
		text += ": " + err.Error()
	}
	o.a.settle(Settlement{Outcome: OutcomeAbandoned, Error: text, Rerun: rerun})
}

// recorded counts and logs the database's answer to one outcome write.
//
// An answer that the write was already recorded (an earlier try committed
// though its reply was lost) counts as the write's success. So does an
// answer that the row is gone when an earlier try of this write failed and
// the answer came before the claim's local deadline: while the lease held,
// nobody else could have taken the row, so only that earlier try (a
// completion that deletes its row, or its effect followed by the next
// claim's) can have made it go.
func (w *Worker) recorded(o outcome, r lease.Result) {
	a := o.a
	var settled Settlement
	defer func() {
		w.forget(a)
		a.settle(settled)
	}()
	if o.commitUnknown && r.Err != nil {
		// The handler's COMMIT failed, yet the row shows its completion:
		// DONE at the claim's generation, or deleted before the lease
		// could expire (nobody else could have taken the row). It
		// committed; the effect and the completion are both there.
		deadline, _, _ := a.state()
		if r.DoneByClaim || (r.Gone && time.Now().Before(deadline)) {
			w.count.completed.Add(1)
			w.byKind.update(a.claim.Kind, a.q.name, func(s *kindSeries) { s.completed++ })
			w.log.Info("the handler's transaction committed though its COMMIT reported an error",
				"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID)
			settled = Settlement{Outcome: OutcomeCompleted, InHandlerTx: true}
			return
		}
	}
	replayed := r.Err == nil && r.AlreadyRecorded
	if r.Err != nil && r.Gone && o.tries > 0 {
		deadline, _, _ := a.state()
		replayed = time.Now().Before(deadline)
	}
	if r.Err != nil && !replayed {
		w.count.staleRejections.Add(1)
		settled = Settlement{Outcome: OutcomeRejected, Cancelled: r.Cancelled}
		if r.Cancelled {
			w.log.Info("outcome rejected: the event was cancelled while its handler ran", "op", opNames[o.op],
				"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID)
			return
		}
		w.log.Warn("outcome rejected: the claim is no longer owned", "op", opNames[o.op],
			"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID, "gone", r.Gone)
		return
	}
	log := w.log.With("id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID, "attempt", a.claim.Attempt)
	if replayed {
		w.count.outcomesReplayed.Add(1)
		log.Info("outcome found already recorded by an earlier try of the same write", "op", opNames[o.op], "tries", o.tries+1)
	}
	switch {
	case o.op == opComplete:
		w.count.completed.Add(1)
		w.byKind.update(a.claim.Kind, a.q.name, func(s *kindSeries) { s.completed++ })
		log.Debug("event completed")
		settled = Settlement{Outcome: OutcomeCompleted, InHandlerTx: o.commitUnknown}
	case o.op == opRelease:
		w.count.released.Add(1)
		log.Debug("claim released")
		settled = Settlement{Outcome: OutcomeReleased}
	case o.op == opRetry && o.snooze:
		w.count.snoozed.Add(1)
		w.byKind.update(a.claim.Kind, a.q.name, func(s *kindSeries) { s.snoozed++ })
		log.Debug("event snoozed", "delay", o.delay)
		settled = Settlement{Outcome: OutcomeSnoozed}
		w.wakeAfter(a.q, o.delay)
	case o.op == opRetry && (r.Status == leasework.StatusReady || r.Gone):
		w.count.retried.Add(1)
		w.byKind.update(a.claim.Kind, a.q.name, func(s *kindSeries) { s.retried++ })
		log.Info("attempt failed; will retry", "delay", o.delay, "err", logText(o.text))
		settled = Settlement{Outcome: OutcomeRetried, Error: o.text}
		w.wakeAfter(a.q, o.delay)
	default: // fail, or retry on the row's last allowed attempt
		w.count.failed.Add(1)
		w.byKind.update(a.claim.Kind, a.q.name, func(s *kindSeries) { s.failed++ })
		log.Warn("event failed", "err", logText(o.text))
		settled = Settlement{Outcome: OutcomeFailed, Error: o.text}
	}
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

func refsOf(group []outcome) []leasework.Ref {
	refs := make([]leasework.Ref, len(group))
	for i, g := range group {
		refs[i] = g.a.ref
	}
	return refs
}
