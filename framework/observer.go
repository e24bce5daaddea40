package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
	"github.com/sourcegraph/conc/panics"
)

// Observer is told what a worker does with each claim: when it was
// claimed, how its handler ran, and how its outcome settled. It is the
// hook for tracing and metrics beyond the worker's own [Counters] (the
// leaseworkotel module is built on it). Every field may be nil.
//
// The functions are called on the worker's goroutines, for many claims at
// once; they must be safe for concurrent use and return quickly. For one
// claim, they are called in order, each at most once: Claimed, then
// HandlerReturned, then Settled. HandlerReturned is not called when the
// worker stops before the handler starts, nor for a handler still running
// when the worker stops (its claim is settled as abandoned then, possibly
// after Run has returned, as such a handler may still be running). A panic
// in an observer is logged and otherwise ignored. The handler's error is
// its own value: a nil pointer returned as an error is replaced, as the
// worker records it, by an error that says so.
type Observer struct {
	// Claimed is called once per claim, before its handler starts. ctx is
	// the base of the handler's context; the context Claimed returns
	// becomes it (and is passed to the other two functions), so it must be
	// ctx or a context derived from it (another is ignored, and logged). An
	// observer starts a span here.
	Claimed func(ctx context.Context, c *leasework.Claim, info ClaimInfo) context.Context

	// HandlerReturned is called once the handler (with the worker's
	// middleware) returned.
	HandlerReturned func(ctx context.Context, c *leasework.Claim, info HandlerInfo)

	// Settled is called once per claim, when its outcome is settled:
	// recorded by the database, rejected by it, or given up by the worker.
	// After Settled, the worker has forgotten the claim.
	Settled func(ctx context.Context, c *leasework.Claim, s Settlement)
}

// ClaimInfo describes the claim statement that returned a claim.
type ClaimInfo struct {
	Queue string // the queue it was claimed from (also Claim.Queue)
	// Wait is how long the event waited for this claim, from when it was
	// due ([leasework.Claim.DueAt]) to the claim, both by the database
	// clock; zero for a reclaimed row, whose wait was a lease running out.
	Wait time.Duration
	// Sent and Returned are when the claim statement was sent and when
	// its rows came back, by the worker's clock. One statement may return
	// many claims.
	Sent, Returned time.Time
}

// HandlerInfo describes one run of a handler.
type HandlerInfo struct {
	Started time.Time     // when the handler was called
	Ran     time.Duration // how long it ran
	Err     error         // what it returned
	// Cause is why the handler's context ended before it returned, nil if
	// it had not: errors.Is tells [leasework.ErrLeaseLost] (and its
	// refinements [leasework.ErrLeaseUnconfirmed] and
	// [leasework.ErrCancelled]), [leasework.ErrAttemptTimeout] and
	// [leasework.ErrShutdown] apart.
	Cause error
}

// Outcome is how one claim settled.
type Outcome int

// The outcomes of a claim.
const (
	// OutcomeCompleted: the event is DONE (or deleted, when completions
	// delete their rows).
	OutcomeCompleted Outcome = iota + 1
	// OutcomeRetried: back to READY for another attempt after a delay.
	OutcomeRetried
	// OutcomeSnoozed: back to READY after the delay the handler asked for
	// with [leasework.Snooze], without spending an attempt.
	OutcomeSnoozed
	// OutcomeFailed: FAILED, by a permanent error or a spent budget.
	OutcomeFailed
	// OutcomeReleased: given back unfinished, due at once (a stopping
	// worker releases the claims whose handlers ended with its stop).
	OutcomeReleased
	// OutcomeRejected: the database refused the outcome because the claim
	// was no longer owned (a newer claim, an expired lease, a cancel:
	// see Settlement.Cancelled). The row belongs to someone else.
	OutcomeRejected
	// OutcomeAbandoned: the worker gave up writing the outcome (the
	// database stayed unreachable past the claim's local deadline, refused
	// the write, or the worker stopped first); the lease will expire and
	// another claim will run the event again (see Settlement.Rerun).
	OutcomeAbandoned
)

// outcomeInfo is what the worker says of each outcome, the one list every
// figure of outcomes iterates: its name, the name of its counter (in the
// Prometheus output, leasework_<counter>_total, and in [Counters]), the
// counter's help, and whether it is counted per kind and queue too.
var outcomeInfo = [...]struct {
	name, counter, help string
	perKind             bool
}{
	OutcomeCompleted: {"completed", "completed", "Events completed.", true},
	OutcomeRetried:   {"retried", "retried", "Attempts failed and scheduled to run again.", true},
	OutcomeSnoozed:   {"snoozed", "snoozed", "Attempts that asked to run again later, not failures.", true},
	OutcomeFailed:    {"failed", "failed", "Events ended FAILED.", true},
	OutcomeReleased:  {"released", "released", "Claims given back at shutdown.", false},
	OutcomeRejected:  {"rejected", "stale_rejections", "Outcome writes rejected because the claim was no longer owned.", false},
	OutcomeAbandoned: {"abandoned", "outcomes_abandoned", "Outcomes never written because of database errors or the stop's timeout.", false},
}

// numOutcomes sizes the arrays indexed by Outcome.
const numOutcomes = len(outcomeInfo)

// Outcomes returns every outcome, in order.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, numOutcomes-1)
	for o := Outcome(1); int(o) < numOutcomes; o++ {
		out = append(out, o)
	}
	return out
}

// String returns the outcome's name in lower case: "completed", "retried"...
func (o Outcome) String() string {
	if o > 0 && int(o) < numOutcomes {
		return outcomeInfo[o].name
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Settlement describes how a claim's outcome settled.
type Settlement struct {
	Outcome Outcome
	// Error is the handler's error recorded with a retry or a failure
	// (as stored: possibly cut), or why the outcome was abandoned. Empty
	// otherwise.
	Error string
	// InHandlerTx is true when the outcome was a completion committed in
	// the handler's own transaction ([Transactional] handlers).
	InHandlerTx bool
	// Cancelled is true when a rejection came from the event having been
	// cancelled ([lease.Store.Cancel]).
	Cancelled bool
	// Rerun is true when an abandoned outcome was a completion or a
	// failure: the handler ran to its end, and the event runs again once
	// the lease expires (see [Counters].RerunsFromAbandonedOutcomes).
	Rerun bool
	// Delay is how long a retried or snoozed event waits for its next
	// attempt.
	Delay time.Duration
	// Replayed is true when the outcome's write was found already
	// recorded by an earlier try of it whose reply was lost (see
	// [Counters].OutcomesReplayed).
	Replayed bool
}

// Observe adds an observer to the worker. It must be called before Run;
// observers are called in the order they were added, each Claimed given
// the context the previous one returned.
func (w *Worker) Observe(o Observer) error {
	if o.Claimed == nil && o.HandlerReturned == nil && o.Settled == nil {
		return errors.New("framework: Observe: the observer has no function")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("framework: Observe: the worker is already running")
	}
	w.observers = append(w.observers, o)
	return nil
}

// observeClaimed runs the observers' Claimed functions, threading ctx.
func (w *Worker) observeClaimed(ctx context.Context, c *leasework.Claim, info ClaimInfo) context.Context {
	for _, o := range w.observers {
		if o.Claimed == nil {
			continue
		}
		w.contain("Claimed", c, func() {
			switch next := o.Claimed(ctx, c, info); {
			case next == nil:
			case next.Value(handlerBaseKey{}) == nil:
				// Not derived from ctx: the handler would not see the
				// worker's shutdown. Keep ctx.
				w.log.Error("observer's Claimed returned a context not derived from the one it was given; ignored",
					"id", c.ID, "kind", c.Kind)
			default:
				ctx = next
			}
		})
	}
	return ctx
}

// handlerBaseKey marks the contexts of handlers, so that a context an
// observer returns can be checked to derive from the one it was given.
type handlerBaseKey struct{}

// contain runs an observer's function, turning its panic into a log line:
// an observer's bug must not take the worker, and its claims, down.
func (w *Worker) contain(what string, c *leasework.Claim, f func()) {
	var pc panics.Catcher
	pc.Try(f)
	if r := pc.Recovered(); r != nil {
		w.log.Error("observer panicked", "function", what, "id", c.ID, "generation", c.Generation,
			"kind", c.Kind, "panic", fmt.Sprint(r.Value))
	}
}

// observeReturned tells the observers the handler returned, unless the
// claim was already settled (abandoned as the worker stopped). obsMu
// keeps it and settle in order.
func (a *attempt) observeReturned(info HandlerInfo) {
	a.obsMu.Lock()
	defer a.obsMu.Unlock()
	if a.settled {
		return
	}
	for _, o := range a.w.observers {
		if o.HandlerReturned != nil {
			a.w.contain("HandlerReturned", &a.claim, func() { o.HandlerReturned(a.obsCtx, &a.claim, info) })
		}
	}
}

// settle tells the observers how a's outcome settled, once (see finish).
func (a *attempt) settle(s Settlement) {
	a.obsMu.Lock()
	defer a.obsMu.Unlock()
	if a.settled {
		return
	}
	a.settled = true
	for _, o := range a.w.observers {
		if o.Settled != nil {
			a.w.contain("Settled", &a.claim, func() { o.Settled(a.obsCtx, &a.claim, s) })
		}
	}
}
