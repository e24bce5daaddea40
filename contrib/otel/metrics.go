package leaseworkotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
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

// observeWorker observes w's count of claims held back by a limit, read
// from w.Counters at each collection.
func observeWorker(w *framework.Worker, opts []Option) error {
	cfg := newConfig(opts)
	m := cfg.meter()
	held, err := m.Int64ObservableCounter("leasework.claims_held_back", metric.WithUnit("{statement}"),
		metric.WithDescription("Claim statements of the worker that took rows and that a concurrency or rate limit kept from more."))
	if err != nil {
		return fmt.Errorf("leasework.claims_held_back: %w", err)
	}
	worker := metric.WithAttributes(semconv.MessagingClientID(w.ID()))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(held, w.Counters().ClaimsHeldBack, worker)
		return nil
	}, held)
	return err
}

// LimitsTimeout bounds each read of the limits by [ObserveLimits]'s
// callback, within the collection's own deadline.
const LimitsTimeout = 5 * time.Second

// ObserveLimits observes, at each collection of the meter provider (see
// WithMeterProvider), the concurrency limits of store's table, read with
// [lease.Store.Limits] in one query: for each limit, its live attempts
// (leasework.limit.live), its maximum (leasework.limit.max) and the due
// events it holds back while full (leasework.limit.held_back; for a
// partition's limit, the events it set aside), with the attributes
// leasework.table, leasework.limit.scope ("kind", "queue" or "partition")
// and leasework.limit.name (for the default limit of the partitions, "",
// with the live attempts and events set aside of every partition under
// it); and leasework.limits.up, 1 when they could be
// read within [LimitsTimeout], else 0 (the error then goes to otel.Handle,
// and no limit is observed). It observes the rate limits the same way,
// read with [lease.Store.RateLimits] in a second query: for each, the
// attempt starts it counts in the window that ends now
// (leasework.rate_limit.recent) and the most it allows in a window
// (leasework.rate_limit.max), with leasework.limit.scope ("kind", "queue"
// or "partition") and leasework.limit.name (for the default rate limit of
// the partitions, "", its starts those of every partition under it and
// its max that of each); for a partition's rate limit, its events set
// aside (leasework.rate_limit.held_back, as leasework.limit.held_back for
// its concurrency limit; a kind's or a queue's has none: its events held
// back stay READY); and leasework.rate_limits.up. And it
// observes fair scheduling, read with [lease.Store.Weights] and
// [lease.Store.Agings] in a third and fourth: for each fair queue, the
// partitions its claims serve now (leasework.fair.partitions_active, with
// leasework.queue); for each weight, the weight (leasework.fair.weight,
// with leasework.queue and leasework.partition, "" for the queue's
// default); for each queue with a priority aging, its wait
// (leasework.priority_aging, in seconds, with leasework.queue); and
// leasework.fair.up. The figures are the table's, the same from every
// process: call it in one of them (or let each process report them, and
// aggregate by table).
// Unregister the returned registration to stop.
func ObserveLimits(store *lease.Store, opts ...Option) (metric.Registration, error) {
	if store == nil {
		return nil, errors.New("leaseworkotel: ObserveLimits: store is nil")
	}
	cfg := newConfig(opts)
	m := cfg.meter()
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return g
	}
	up := gauge("leasework.limits.up", "1", "Whether the concurrency limits could be read: 1, or 0.")
	live := gauge("leasework.limit.live", "{attempt}", "Attempts counted under the concurrency limit now.")
	most := gauge("leasework.limit.max", "{attempt}", "The most live attempts the concurrency limit allows.")
	held := gauge("leasework.limit.held_back", "{event}", "Events the full concurrency limit holds back now: due READY events of its kind or queue; for a partition's limit, its events set aside.")
	ratesUp := gauge("leasework.rate_limits.up", "1", "Whether the rate limits could be read: 1, or 0.")
	recent := gauge("leasework.rate_limit.recent", "{start}", "Attempt starts the rate limit counts in the window that ends now; for the default of the partitions, those of every partition under it.")
	rateMax := gauge("leasework.rate_limit.max", "{start}", "The most attempt starts the rate limit allows in any window of its period; for the default of the partitions, of each partition.")
	rateHeld := gauge("leasework.rate_limit.held_back", "{event}", "Events of the partition set aside now (WAITING without a key), by its rate or its concurrency limit; for the default of the partitions, those of every partition under it. Partition rate limits only.")
	fairUp := gauge("leasework.fair.up", "1", "Whether the fair queues' weights and the priority agings could be read: 1, or 0.")
	active := gauge("leasework.fair.partitions_active", "{partition}", "Partitions of the fair queue that its claims serve now (those with due events that claims have seen).")
	weight := gauge("leasework.fair.weight", "1", "The weight of a partition in a fair queue; partition \"\" is the queue's default, which makes it fair.")
	aging, err := m.Float64ObservableGauge("leasework.priority_aging", metric.WithUnit("s"),
		metric.WithDescription("How long a due event of the queue waits before it is claimed as one priority level higher."))
	if err != nil {
		errs = append(errs, fmt.Errorf("leasework.priority_aging: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	table := TableKey.String(store.Schema() + "." + store.Table())
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, LimitsTimeout)
		defer cancel()
		ls, err := store.Limits(ctx)
		if err != nil {
			o.ObserveInt64(up, 0, metric.WithAttributes(table))
			otel.Handle(fmt.Errorf("leaseworkotel: read the concurrency limits: %w", err))
		} else {
			o.ObserveInt64(up, 1, metric.WithAttributes(table))
			for _, l := range ls {
				attrs := metric.WithAttributes(table, LimitScopeKey.String(l.Scope), LimitNameKey.String(l.Name))
				o.ObserveInt64(live, int64(l.Live), attrs)
				o.ObserveInt64(most, int64(l.Max), attrs)
				o.ObserveInt64(held, l.HeldBack, attrs)
			}
		}
		rs, err := store.RateLimits(ctx)
		if err != nil {
			o.ObserveInt64(ratesUp, 0, metric.WithAttributes(table))
			otel.Handle(fmt.Errorf("leaseworkotel: read the rate limits: %w", err))
		} else {
			o.ObserveInt64(ratesUp, 1, metric.WithAttributes(table))
			for _, l := range rs {
				attrs := metric.WithAttributes(table, LimitScopeKey.String(l.Scope), LimitNameKey.String(l.Name))
				o.ObserveInt64(recent, int64(l.Recent), attrs)
				o.ObserveInt64(rateMax, int64(l.Max), attrs)
				if l.Scope == lease.ScopePartition {
					o.ObserveInt64(rateHeld, l.HeldBack, attrs)
				}
			}
		}
		observeFair(ctx, store, o, table, fairUp, active, weight, aging)
		return nil
	}, up, live, most, held, ratesUp, recent, rateMax, rateHeld, fairUp, active, weight, aging)
}

// observeFair observes the weights and agings of store's table: each
// fair queue's partitions served (active), each weight (weight), each
// queue's aging (aging), and whether they could be read (up); a failed
// read goes to otel.Handle.
func observeFair(ctx context.Context, store *lease.Store, o metric.Observer, table attribute.KeyValue,
	up, active, weight metric.Int64ObservableGauge, aging metric.Float64ObservableGauge) {
	ws, err := store.Weights(ctx)
	var as map[string]time.Duration
	if err == nil {
		as, err = store.Agings(ctx)
	}
	if err != nil {
		o.ObserveInt64(up, 0, metric.WithAttributes(table))
		otel.Handle(fmt.Errorf("leaseworkotel: read the weights and priority agings: %w", err))
		return
	}
	o.ObserveInt64(up, 1, metric.WithAttributes(table))
	for _, w := range ws {
		queue := QueueKey.String(w.Queue)
		if w.Partition == "" {
			o.ObserveInt64(active, int64(w.Active), metric.WithAttributes(table, queue))
		}
		o.ObserveInt64(weight, int64(w.Weight.Weight), metric.WithAttributes(table, queue, PartitionKey.String(w.Partition)))
	}
	for q, d := range as {
		o.ObserveFloat64(aging, d.Seconds(), metric.WithAttributes(table, QueueKey.String(q)))
	}
}
