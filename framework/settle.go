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
	if s.Outcome == OutcomeAbandoned && !st.returned {
		return // no outcome to write: the handler never started, or never returned
	}
	if s.Outcome <= 0 || int(s.Outcome) >= numOutcomes {
		w.log.Error("settlement of an unknown outcome", "id", c.ID, "outcome", s.Outcome)
		return
	}
	w.count.outcomes[s.Outcome].Add(1)
	st.series.outcomes[s.Outcome].Add(1)
	if s.Replayed {
		w.count.outcomesReplayed.Add(1)
	}
	if s.Outcome == OutcomeAbandoned && s.Rerun {
		w.count.rerunsFromAbandonedOutcomes.Add(1)
	}
	log := w.log.With("id", c.ID, "generation", c.Generation, "event_id", c.EventID, "attempt", c.Attempt)
	if s.Replayed {
		log.Info("outcome found already recorded by an earlier try of the same write", "outcome", s.Outcome)
	}
	switch s.Outcome {
	case OutcomeRetried:
		log.Info("attempt failed; will retry", "delay", s.Delay, "err", logText(s.Error))
	case OutcomeFailed:
		log.Warn("event failed", "err", logText(s.Error))
	case OutcomeRejected:
		switch {
		case s.Cancelled:
			log.Info("outcome rejected: the event was cancelled while its handler ran", "in_handler_tx", s.InHandlerTx)
		case s.InHandlerTx:
			log.Warn("completion in the handler's transaction rejected: the claim is no longer owned; its writes were rolled back")
		default:
			log.Warn("outcome rejected: the claim is no longer owned")
		}
	case OutcomeAbandoned:
		log.Error("outcome not recorded; the lease will expire and the event will be claimed again",
			"why", s.Error, "rerun", s.Rerun)
	default:
		log.Debug("claim settled", "outcome", s.Outcome, "delay", s.Delay, "in_handler_tx", s.InHandlerTx)
	}
}
