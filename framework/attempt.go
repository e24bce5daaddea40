package framework

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/handlerctx"
	"github.com/leasework/leasework/lease"
	"github.com/sourcegraph/conc/panics"
)

// attempt is one claim held by this worker, from the claim until its
// outcome is written (or, for a handler that never returns, until the
// worker stops).
type attempt struct {
	w         *Worker
	q         *queue // the queue it was claimed from
	ref       leasework.Ref
	claim     leasework.Claim // handed to the handler
	kind      *kind
	ctx       context.Context // the handler's: ends on lease loss, timeout, shutdown, return
	cancel    context.CancelCauseFunc
	stopTimer context.CancelFunc // releases the attempt timeout's timer

	mu        sync.Mutex
	deadline  time.Time   // local instant at which the worker gives the claim up
	confirmed time.Time   // when the statement that set deadline was sent
	watchdog  *time.Timer // cancels the handler at deadline
	lost      bool        // the handler was cancelled with a cause matching ErrLeaseLost
	stale     bool        // the database said the claim is no longer ours
	ended     bool        // the handler returned
	endedAt   time.Time
	hung      bool              // counted as a handler that ignored its cancelled context
	tx        txPhase           // a Transactional handler's completion
	steps     map[string][]byte // the steps this attempt recorded outside a transaction (Step)

	obsMu   sync.Mutex      // orders the observers' HandlerReturned and Settled
	settled bool            // the observers were told how it settled; under obsMu
	obsCtx  context.Context // what the observers' Claimed returned
}

// errAttemptOver ends an attempt's context after its handler returned.
var errAttemptOver = errors.New("framework: attempt over")

// startAttempt registers a claim and starts its handler. sent is the local
// time taken before the claim statement was sent: the database's lease
// cannot have started earlier; returned, when its rows came back. It
// reports false, and starts nothing, when the worker has stopped.
//
// reserved says the claim's slot was counted in q already (see
// writeTakingTurns): it is counted once, and given back if the attempt
// does not start.
func (w *Worker) startAttempt(q *queue, c leasework.Claim, sent, returned time.Time, reserved bool) bool {
	a := &attempt{
		w:         w,
		q:         q,
		ref:       c.Ref(),
		claim:     c,
		kind:      w.kinds[c.Kind],
		deadline:  sent.Add(w.cfg.Lease - w.cfg.margin()),
		confirmed: sent,
		stopTimer: func() {},
	}
	// The claim's statement time is its lease's start, by the database
	// clock, as the due time is.
	var wait time.Duration
	if !c.Reclaimed && !c.DueAt.IsZero() {
		wait = max(c.LeaseUntil.Add(-w.cfg.Lease).Sub(c.DueAt), 0)
	}
	base := w.observeClaimed(w.handlerCtx, &a.claim, ClaimInfo{Queue: q.name, Wait: wait, Sent: sent, Returned: returned})
	a.obsCtx = base
	ctx, cancel := context.WithCancelCause(base)
	timeout := w.cfg.AttemptTimeout
	if a.kind != nil && a.kind.timeout > 0 {
		timeout = a.kind.timeout
	}
	if timeout > 0 {
		ctx, a.stopTimer = context.WithTimeoutCause(ctx, timeout, leasework.ErrAttemptTimeout)
	}
	a.ctx, a.cancel = handlerctx.With(ctx, a), cancel

	w.mu.Lock()
	if w.stopped {
		if reserved {
			q.running--
			q.held--
		}
		w.mu.Unlock()
		if reserved {
			signal(q.slotFreed)
		}
		a.stopTimer()
		cancel(leasework.ErrShutdown)
		a.finish(Settlement{Outcome: OutcomeAbandoned, Error: "the worker stopped before the handler started"})
		return false
	}
	a.mu.Lock()
	a.watchdog = time.AfterFunc(time.Until(a.deadline), a.expire)
	a.mu.Unlock()
	w.live[a.ref] = a
	if !reserved {
		q.running++
		q.held++
	}
	w.mu.Unlock()
	go w.runAttempt(a)
	return true
}

// runAttempt runs the handler and queues its outcome. Whatever happens, the
// handler's slot is freed when it returns.
func (w *Worker) runAttempt(a *attempt) {
	defer w.attemptDone(a.q)
	var err error
	if a.kind == nil { // cannot happen: claims are restricted to registered kinds
		err = fmt.Errorf("framework: no handler for kind %q", a.claim.Kind)
	} else {
		began := time.Now()
		err = w.call(a)
		info := HandlerInfo{Started: began, Ran: time.Since(began), Err: err}
		if a.ctx.Err() != nil {
			info.Cause = context.Cause(a.ctx)
		}
		a.observeReturned(info)
	}
	cause := context.Cause(a.ctx)
	a.end()
	a.cancel(errAttemptOver)
	a.stopTimer()
	switch a.txPhase() {
	case txCommitted: // the handler's transaction recorded the outcome
		a.finish(Settlement{Outcome: OutcomeCompleted, InHandlerTx: true})
		return
	case txRejected: // stale: another owner has the claim
		if errors.Is(cause, leasework.ErrCancelled) && w.outcomes.push(outcome{a: a, write: lease.Release(a.ref)}) {
			// Cancelled while it ran: the row waits for this attempt to
			// stop, which it now has. Its outcome write says so; rejected
			// as cancelled, it ends the row (lease.Store.Cancel).
			return
		}
		a.finish(Settlement{Outcome: OutcomeRejected, InHandlerTx: true, Cancelled: errors.Is(cause, leasework.ErrCancelled)})
		return
	}
	o := w.outcomeOf(a, err, cause)
	o.commitUnknown = a.txPhase() == txCommitUnknown
	if !w.outcomes.push(o) {
		// Told apart from the settlement: a handler that hung as the
		// worker stopped was settled then.
		w.log.Warn("handler returned after the worker stopped; its outcome is not recorded and its claim is left to expire",
			"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID)
		a.finish(Settlement{Outcome: OutcomeAbandoned, Error: "the handler returned after the worker stopped", Rerun: o.reruns()})
	}
}

// attemptDone frees a handler's slot in q.
func (w *Worker) attemptDone(q *queue) {
	w.mu.Lock()
	q.running--
	w.mu.Unlock()
	signal(q.slotFreed)
	signal(w.handlerReturned)
}

// call runs the handler, turning a panic into a *leasework.PanicError.
func (w *Worker) call(a *attempt) (err error) {
	var pc panics.Catcher
	pc.Try(func() { err = a.kind.run.Handle(a.ctx, &a.claim) })
	if isNilPointer(err) {
		err = fmt.Errorf("framework: the handler returned a nil %T as a non-nil error", err)
	}
	if r := pc.Recovered(); r != nil {
		w.count.panics.Add(1)
		err = &leasework.PanicError{Value: r.Value, Stack: r.Stack}
		w.log.Error("handler panicked", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind, "panic", fmt.Sprint(r.Value))
	}
	return err
}

// outcomeOf turns a handler's result into the outcome to write. The error
// is the handler's own value: its methods (Error, Is, As, Unwrap) may
// panic (a nil pointer returned as an error is replaced already, by call).
// Such a panic is contained like a handler's: the attempt is recorded as
// failed with a text that says what went wrong.
func (w *Worker) outcomeOf(a *attempt, err, cause error) (o outcome) {
	var pc panics.Catcher
	pc.Try(func() { o = w.decide(a, err, cause) })
	if r := pc.Recovered(); r != nil {
		w.count.panics.Add(1)
		w.log.Error("panic while reading the handler's error", "id", a.ref.ID, "generation", a.ref.Generation,
			"kind", a.claim.Kind, "type", fmt.Sprintf("%T", err), "panic", fmt.Sprint(r.Value))
		text := fmt.Sprintf("framework: the handler's error (a %T) panicked when read: %v\n%s", err, r.Value, r.Stack)
		o = w.decide(a, errors.New(text), cause)
	}
	return o
}

// isNilPointer reports whether err is a nil pointer in a non-nil interface:
// `var e *MyErr; return e`.
func isNilPointer(err error) bool {
	if err == nil {
		return false
	}
	v := reflect.ValueOf(err)
	return (v.Kind() == reflect.Pointer || v.Kind() == reflect.UnsafePointer) && v.IsNil()
}

// decide turns a handler's result into the outcome to write. The text is
// stored as it is: the store makes every text valid and bounded.
func (w *Worker) decide(a *attempt, err, cause error) outcome {
	o := outcome{a: a}
	if err == nil {
		o.write = lease.Complete(a.ref)
		if w.cfg.Retention == 0 {
			o.write = lease.CompleteAndDelete(a.ref)
		}
		return o
	}
	var snooze *leasework.SnoozeError
	if errors.As(err, &snooze) && !leasework.IsPermanent(err) {
		// Not a failure: back to READY after the delay, the last error kept.
		o.write = lease.Snooze(a.ref, handlerDelay(snooze.Delay), a.claim.LastError)
		return o
	}
	if errors.Is(cause, leasework.ErrShutdown) && !leasework.IsPermanent(err) {
		o.write = lease.Release(a.ref)
		return o
	}
	text := err.Error()
	if cause != nil && !errors.Is(err, cause) {
		text += " (" + cause.Error() + ")"
	}
	policy := RetryPolicy{}
	if a.kind != nil {
		policy = a.kind.policy
	}
	// The policy counts failures, this one included, never snoozes.
	failure := a.claim.Failures() + 1
	switch {
	case leasework.IsPermanent(err), a.kind == nil:
		o.write = lease.Fail(a.ref, text)
	case policy.MaxAttempts > 0 && failure >= policy.MaxAttempts:
		o.write = lease.Fail(a.ref, fmt.Sprintf("failed attempt %d of the retry policy's %d: %s", failure, policy.MaxAttempts, text))
	default:
		delay := policy.delay(failure)
		var after *leasework.RetryAfterError
		if errors.As(err, &after) {
			delay = handlerDelay(after.Delay)
		}
		o.write = lease.Retry(a.ref, delay, text)
	}
	return o
}

// handlerDelay bounds a delay a handler chose (leasework.Snooze,
// leasework.RetryAfter): negative is zero, and none is longer than a retry
// policy's longest, MaxRetryInterval.
func handlerDelay(d time.Duration) time.Duration { return min(max(d, 0), MaxRetryInterval) }

// maxLogText bounds an error text written to the log.
const maxLogText = 8 << 10

// logText makes an error text fit for a log line.
func logText(s string) string { return lease.CleanText(s, maxLogText) }

// end marks the handler returned; from now on only the outcome writer
// cares about the claim.
func (a *attempt) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended, a.endedAt = true, time.Now()
	a.watchdog.Stop()
}

// expire runs when the local deadline passes without a confirmed renewal:
// past it another worker may own the row, so the handler must stop. A
// handler whose context had already ended (attempt timeout, shutdown) and
// that has still not returned is not renewed any more: its claim is left to
// expire, and it is counted as hung rather than as a lost lease.
func (a *attempt) expire() {
	a.mu.Lock()
	if a.lost || a.ended || a.hung || time.Now().Before(a.deadline) {
		a.mu.Unlock()
		return
	}
	if a.ctx.Err() != nil {
		a.hung = true
		a.mu.Unlock()
		a.w.count.hungHandlers.Add(1)
		a.w.log.Warn("handler has not returned since its context ended; its claim was not renewed and is left to expire",
			"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID, "kind", a.claim.Kind,
			"cause", context.Cause(a.ctx))
		return
	}
	a.lost = true
	a.mu.Unlock()
	a.w.count.leasesLost.Add(1)
	a.w.count.localLeaseTimeouts.Add(1)
	a.cancel(leasework.ErrLeaseUnconfirmed)
	a.w.log.Warn("lease not confirmed in time; handler cancelled", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind)
}

// abandon gives up the claim of a handler still running when the worker
// stops: its claim is neither renewed nor released, and expires.
func (a *attempt) abandon() {
	a.mu.Lock()
	a.watchdog.Stop()
	counted := a.hung
	a.hung = true
	a.mu.Unlock()
	if !counted {
		a.w.count.hungHandlers.Add(1)
	}
	a.w.log.Warn("handler still running as the worker stops; its claim is left to expire",
		"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID, "kind", a.claim.Kind)
	// Not on Run's goroutine: the observers of a claim are serialized, and
	// this one's HandlerReturned may be running, for as long as it likes,
	// as a hung handler does.
	go a.finish(Settlement{Outcome: OutcomeAbandoned, Error: "the handler was still running as the worker stopped"})
}

// lose records that the database rejected a write for this claim, and
// cancels the handler if it is still running, with cause: ErrLeaseLost, or
// ErrCancelled when the rejection showed the event cancelled.
func (a *attempt) lose(why string, cause error) {
	a.mu.Lock()
	a.stale = true
	if a.lost || a.ended || a.hung {
		// A hung handler's claim was given up already: a write refused
		// since (a renewal sent before it was given up, answered after
		// another worker took the row) loses nothing more.
		a.mu.Unlock()
		return
	}
	a.lost = true
	a.watchdog.Stop()
	a.mu.Unlock()
	a.w.count.leasesLost.Add(1)
	if errors.Is(cause, leasework.ErrCancelled) {
		a.w.count.cancelled.Add(1)
	}
	a.cancel(cause)
	a.w.log.Warn("lease lost; handler cancelled", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind, "by", why, "cause", cause)
}

// extend moves the local deadline after a confirmed renewal. sent is the
// local time taken before the renewal was sent.
func (a *attempt) extend(sent time.Time) {
	d := sent.Add(a.w.cfg.Lease - a.w.cfg.margin())
	a.mu.Lock()
	defer a.mu.Unlock()
	if !d.After(a.deadline) {
		return
	}
	a.deadline, a.confirmed = d, sent
	if !a.lost && !a.ended && !a.hung {
		a.watchdog.Reset(time.Until(d))
	}
}

// state reads what the renewer and the outcome writer need.
func (a *attempt) state() (deadline, confirmed time.Time, stale bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deadline, a.confirmed, a.stale
}

// renewable reports whether the claim is still worth renewing: the
// database has not refused it, and either its handler runs with a live
// context, or the handler returned and its outcome is still to be written
// (for as long as the outcome writer keeps it: see keepForRetry). A
// handler whose context ended (lease lost, attempt timeout, shutdown) but
// that has not returned is not renewed: its claim expires and another
// worker may take the event over.
func (a *attempt) renewable() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stale || a.hung:
		return false
	case a.ended:
		return true
	default:
		return a.ctx.Err() == nil
	}
}
