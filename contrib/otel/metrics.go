package leaseworkotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

// durationBuckets are the histograms' bucket boundaries, in seconds: the
// semantic conventions' for durations, stretched to an hour, since an event
// may wait in its queue for long.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300, 900, 3600}

// instruments are the observer's metrics; the package doc has their table.
type instruments struct {
	claimed, reclaimed, leaseLosses metric.Int64Counter
	outcomes                        map[framework.Outcome]metric.Int64Counter
	queueWait, runTime              metric.Float64Histogram
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{claim}"), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return h
	}
	ins := &instruments{
		claimed:     counter("leasework.claimed", "Claims taken by the worker."),
		reclaimed:   counter("leasework.reclaimed", "Claims of rows whose previous owner's lease had expired (also counted in leasework.claimed)."),
		leaseLosses: counter("leasework.lease_losses", "Handlers whose context ended because the claim was lost: taken over, not confirmed in time, or cancelled."),
		outcomes: map[framework.Outcome]metric.Int64Counter{
			framework.OutcomeCompleted: counter("leasework.completed", "Claims completed: the event is done."),
			framework.OutcomeRetried:   counter("leasework.retried", "Claims whose handler failed, the event scheduled to run again."),
			framework.OutcomeSnoozed:   counter("leasework.snoozed", "Claims whose handler asked to run again later, without spending an attempt."),
			framework.OutcomeFailed:    counter("leasework.failed", "Claims that ended their event FAILED: a permanent error or a spent budget."),
			framework.OutcomeReleased:  counter("leasework.released", "Claims given back unfinished by a stopping worker."),
			framework.OutcomeRejected:  counter("leasework.stale_rejections", "Outcomes the database rejected because the claim was no longer owned."),
			framework.OutcomeAbandoned: counter("leasework.abandoned", "Outcomes the worker gave up writing; the lease expires and the event runs again."),
		},
		queueWait: histogram("leasework.queue_wait", "Time from when an event was due (enqueued, or its retry due) to its claim; reclaims are not recorded."),
		runTime:   histogram("leasework.run_time", "Time a handler ran, middleware included."),
	}
	return ins, errors.Join(errs...)
}

// leaseLoss names why a handler's context ended, when the claim was lost:
// "cancelled", "unconfirmed" or "lost"; "" for any other cause.
func leaseLoss(cause error) string {
	switch {
	case errors.Is(cause, leasework.ErrCancelled):
		return "cancelled"
	case errors.Is(cause, leasework.ErrLeaseUnconfirmed):
		return "unconfirmed"
	case errors.Is(cause, leasework.ErrLeaseLost):
		return "lost"
	}
	return ""
}
