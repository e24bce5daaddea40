package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/sourcegraph/conc/panics"
)

// attempt is one claim held by this worker, from the claim until its
// outcome is written.
type attempt struct {
	w      *Worker
	ref    leasework.Ref
	claim  leasework.Claim // handed to the handler
	kind   *kind
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	deadline  time.Time   // local instant at which the worker gives the claim up
	confirmed time.Time   // when the statement that set deadline was sent
	watchdog  *time.Timer // cancels the handler at deadline
	lost      bool        // the handler was cancelled with ErrLeaseLost
	stale     bool        // the database said the claim is no longer ours
	ended     bool        // the handler returned
}

// errAttemptOver ends an attempt's context after its handler returned.
var errAttemptOver = errors.New("framework: attempt over")

// startAttempt registers a claim and hands it to the handler pool. sent is
// the local time taken before the claim statement was sent: the database's
// lease cannot have started earlier.
func (w *Worker) startAttempt(c leasework.Claim, sent time.Time) {
	a := &attempt{
		w:         w,
		ref:       c.Ref(),
		claim:     c,
		kind:      w.kinds[c.Kind],
		deadline:  sent.Add(w.cfg.Lease - w.cfg.margin()),
		confirmed: sent,
	}
	ctx, cancel := context.WithCancelCause(w.handlerCtx)
	a.ctx, a.cancel = context.WithValue(ctx, claimKey{}, a), cancel
	a.mu.Lock()
	a.watchdog = time.AfterFunc(time.Until(a.deadline), a.expire)
	a.mu.Unlock()

	w.mu.Lock()
	w.live[a.ref] = a
	w.running++
	w.mu.Unlock()
	w.count.claimed.Add(1)
	if c.Reclaimed {
		w.count.reclaimed.Add(1)
		w.log.Info("reclaimed an expired claim", "id", c.ID, "event_id", c.EventID, "generation", c.Generation, "attempt", c.Attempt)
	}
	w.handlers.Go(func() { w.runAttempt(a) })
}

// runAttempt runs the handler and passes its result to the outcome writer.
func (w *Worker) runAttempt(a *attempt) {
	ctx := a.ctx
	if w.cfg.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, w.cfg.AttemptTimeout, leasework.ErrAttemptTimeout)
		defer cancel()
	}
	var err error
	if a.kind == nil { // cannot happen: claims are restricted to registered kinds
		err = fmt.Errorf("framework: no handler for kind %q", a.claim.Kind)
	} else {
		err = w.call(ctx, a)
	}
	cause := context.Cause(ctx)
	a.end()
	a.cancel(errAttemptOver)
	w.outcomes <- w.decide(a, err, cause)

	w.mu.Lock()
	w.running--
	w.mu.Unlock()
	signal(w.slotFreed)
}

// call runs the handler, turning a panic into a *leasework.PanicError.
func (w *Worker) call(ctx context.Context, a *attempt) (err error) {
	var pc panics.Catcher
	pc.Try(func() { err = a.kind.handler.Handle(ctx, &a.claim) })
	if r := pc.Recovered(); r != nil {
		w.count.panics.Add(1)
		err = &leasework.PanicError{Value: r.Value, Stack: r.Stack}
		w.log.Error("handler panicked", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind, "panic", fmt.Sprint(r.Value))
	}
	return err
}

// maxErrorText bounds the error text stored in a row.
const maxErrorText = 64 << 10

// decide turns a handler's result into the outcome to write.
func (w *Worker) decide(a *attempt, err, cause error) outcome {
	o := outcome{a: a}
	if err == nil {
		o.op = opComplete
		return o
	}
	if errors.Is(cause, leasework.ErrShutdown) && !leasework.IsPermanent(err) {
		o.op = opRelease
		return o
	}
	o.text = err.Error()
	if cause != nil && !errors.Is(err, cause) {
		o.text += " (" + cause.Error() + ")"
	}
	policy := RetryPolicy{}
	if a.kind != nil {
		policy = a.kind.policy
	}
	switch {
	case leasework.IsPermanent(err):
		o.op = opFail
	case policy.MaxAttempts > 0 && a.claim.Attempt >= policy.MaxAttempts:
		o.op = opFail
		o.text = fmt.Sprintf("attempt %d of the retry policy's %d: %s", a.claim.Attempt, policy.MaxAttempts, o.text)
	case a.kind == nil:
		o.op = opFail
	default:
		o.op = opRetry
		o.delay = policy.delay(a.claim.Attempt)
	}
	if len(o.text) > maxErrorText {
		o.text = o.text[:maxErrorText] + "…"
	}
	return o
}

// end marks the handler returned; from now on only the outcome writer
// cares about the claim.
func (a *attempt) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	a.watchdog.Stop()
}

// expire runs when the local deadline passes without a confirmed renewal:
// past it another worker may own the row, so the handler must stop.
func (a *attempt) expire() {
	a.mu.Lock()
	if a.lost || a.ended || time.Now().Before(a.deadline) {
		a.mu.Unlock()
		return
	}
	a.lost = true
	a.mu.Unlock()
	a.w.count.leasesLost.Add(1)
	a.w.count.localLeaseTimeouts.Add(1)
	a.cancel(leasework.ErrLeaseLost)
	a.w.log.Warn("lease not confirmed in time; handler cancelled", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind)
}

// lose records that the database rejected a write for this claim, and
// cancels the handler if it is still running.
func (a *attempt) lose(why string) {
	a.mu.Lock()
	a.stale = true
	if a.lost || a.ended {
		a.mu.Unlock()
		return
	}
	a.lost = true
	a.watchdog.Stop()
	a.mu.Unlock()
	a.w.count.leasesLost.Add(1)
	a.cancel(leasework.ErrLeaseLost)
	a.w.log.Warn("lease lost; handler cancelled", "id", a.ref.ID, "generation", a.ref.Generation, "kind", a.claim.Kind, "by", why)
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
	if !a.lost && !a.ended {
		a.watchdog.Reset(time.Until(d))
	}
}

// state reads what the renewer and the outcome writer need.
func (a *attempt) state() (deadline, confirmed time.Time, stale bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deadline, a.confirmed, a.stale
}
