package framework

import (
	"context"

	"github.com/leasework/leasework"
)

// finish is the one place an attempt ends: the worker forgets its claim,
// then the observers are told how it settled, once. The first observer is
// the worker's own (ownObserver): its counters, per-kind series and log
// lines are kept from what every observer is told, no more.
func (a *attempt) finish(s Settlement) {
	a.w.forget(a)
	a.settle(s)
}

// ownState is what the worker's own observer keeps of one claim, in the
// claim's context.
type ownState struct {
	series   *kindSeries
	returned bool // the handler returned: the settlement is of its outcome
}

type ownStateKey struct{}

// ownObserver is the first observer of every worker: the counters of
// [Counters] that describe claims and their outcomes, the per-kind series
// of the Prometheus output, and the log line of each outcome are kept
// here, from the [Observer] calls alone.
func (w *Worker) ownObserver() Observer {
	return Observer{
		Claimed: func(ctx context.Context, c *leasework.Claim, info ClaimInfo) context.Context {
			st := &ownState{series: w.byKind.of(c.Kind, info.Queue)}
			st.series.claimed.Add(1)
			if !c.Reclaimed && !c.DueAt.IsZero() {
				st.series.wait.observe(info.Wait)
			}
			w.count.claimed.Add(1)
			if c.Reclaimed {
				w.count.reclaimed.Add(1)
				w.log.Info("reclaimed an expired claim", "id", c.ID, "event_id", c.EventID, "generation", c.Generation, "attempt", c.Attempt)
			}
			return context.WithValue(ctx, ownStateKey{}, st)
		},
		HandlerReturned: func(ctx context.Context, c *leasework.Claim, info HandlerInfo) {
			st := ctx.Value(ownStateKey{}).(*ownState)
			st.returned = true
			st.series.run.observe(info.Ran)
		},
		Settled: func(ctx context.Context, c *leasework.Claim, s Settlement) {
			w.settled(ctx.Value(ownStateKey{}).(*ownState), c, s)
		},
	}
}

// settled counts and logs one settlement.
func (w *Worker) settled(st *ownState, c *leasework.Claim, s Settlement) {
	log := w.log.With("id", c.ID, "generation", c.Generation, "event_id", c.EventID, "attempt", c.Attempt)
	if s.Replayed {
		w.count.outcomesReplayed.Add(1)
		log.Info("outcome found already recorded by an earlier try of the same write", "outcome", s.Outcome)
	}
	switch s.Outcome {
	case OutcomeCompleted:
		w.count.completed.Add(1)
		st.series.completed.Add(1)
		log.Debug("event completed", "in_handler_tx", s.InHandlerTx)
	case OutcomeRetried:
		w.count.retried.Add(1)
		st.series.retried.Add(1)
		log.Info("attempt failed; will retry", "delay", s.Delay, "err", logText(s.Error))
	case OutcomeSnoozed:
		w.count.snoozed.Add(1)
		st.series.snoozed.Add(1)
		log.Debug("event snoozed", "delay", s.Delay)
	case OutcomeFailed:
		w.count.failed.Add(1)
		st.series.failed.Add(1)
		log.Warn("event failed", "err", logText(s.Error))
	case OutcomeReleased:
		w.count.released.Add(1)
		log.Debug("claim released")
	case OutcomeRejected:
		w.count.staleRejections.Add(1)
		switch {
		case s.Cancelled:
			log.Info("outcome rejected: the event was cancelled while its handler ran", "in_handler_tx", s.InHandlerTx)
		case s.InHandlerTx:
			log.Warn("completion in the handler's transaction rejected: the claim is no longer owned; its writes were rolled back")
		default:
			log.Warn("outcome rejected: the claim is no longer owned")
		}
	case OutcomeAbandoned:
		if !st.returned {
			return // no outcome to write: the handler never started, or never returned
		}
		w.count.outcomesAbandoned.Add(1)
		if s.Rerun {
			w.count.rerunsFromAbandonedOutcomes.Add(1)
		}
		log.Error("outcome not recorded; the lease will expire and the event will be claimed again",
			"why", s.Error, "rerun", s.Rerun)
	}
}
