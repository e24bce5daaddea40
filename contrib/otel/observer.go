package leaseworkotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

// Instrument adds the [Observer] made with opts to w (w.Observe). Call it
// before w.Run.
//
// Its attempt spans also name the worker: messaging.client.id is w.ID().
// It also observes the worker's count of claims that a concurrency or
// rate limit held back, leasework.claims_held_back (see the package doc), which an
// [Observer] alone cannot.
func Instrument(w *framework.Worker, opts ...Option) error {
	o, err := newObserver(opts, w.ID())
	if err != nil {
		return err
	}
	if err := observeWorker(w, opts); err != nil {
		return err
	}
	return w.Observe(o)
}

// Observer returns a framework.Observer that traces every claim of a
// worker and records its metrics (see the package doc). Of the options, it
// uses all; it fails only when the meter refuses an instrument.
//
// For each claim it starts the attempt span, a consumer span named
// "process <kind>" whose parent (or link, with WithLinkToEnqueue) is the
// enqueue span found in the claim's metadata, and a new root when there is
// none; the handler's context carries it, so the handler's spans are its
// children. Under it: a "claim" span for the claim statement that returned
// the claim, and, when the outcome settles, an "outcome" span from the
// handler's return to the settlement. The attempt span ends with the
// outcome.
func Observer(opts ...Option) (framework.Observer, error) {
	return newObserver(opts, "")
}

func newObserver(opts []Option, workerID string) (framework.Observer, error) {
	cfg := newConfig(opts)
	ins, err := newInstruments(cfg.meter())
	if err != nil {
		return framework.Observer{}, err
	}
	o := &observer{cfg: cfg, tracer: cfg.tracer(), ins: ins}
	if workerID != "" {
		o.worker = []attribute.KeyValue{semconv.MessagingClientID(workerID)}
	}
	return framework.Observer{Claimed: o.claimed, HandlerReturned: o.handlerReturned, Settled: o.settled}, nil
}

type observer struct {
	cfg    config
	tracer trace.Tracer
	ins    *instruments
	worker []attribute.KeyValue // of the attempt span: the worker's id, when known
}

// attemptState is what the observer keeps of one claim, in the context
// returned by Claimed (under the observer's own pointer as the key).
type attemptState struct {
	span    trace.Span
	attrs   []attribute.KeyValue // of every span of the claim
	metrics metric.MeasurementOption

	mu       sync.Mutex
	returned time.Time // when the handler returned; zero before
	errored  bool      // the attempt span's status is already Error
	ended    bool      // the attempt span has ended
}

func (o *observer) state(ctx context.Context) *attemptState {
	st, _ := ctx.Value(o).(*attemptState)
	return st
}

func (o *observer) claimed(ctx context.Context, c *leasework.Claim, info framework.ClaimInfo) context.Context {
	attrs := claimAttributes(c)
	// The enqueuer's context, from the metadata, and nothing else: a span
	// in the worker's own context (Run's) must not become the parent of
	// an event that came without one.
	parent := o.cfg.textMapPropagator().Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), propagation.MapCarrier(c.Metadata))
	enqueuer := trace.SpanContextFromContext(parent)

	start := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(info.Sent),
		trace.WithAttributes(attrs...),
		trace.WithAttributes(semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"), ReclaimedKey.Bool(c.Reclaimed)),
		trace.WithAttributes(o.worker...),
	}
	if o.cfg.link {
		start = append(start, trace.WithNewRoot())
		if enqueuer.IsValid() {
			start = append(start, trace.WithLinks(trace.Link{SpanContext: enqueuer}))
		}
	}
	ctx, span := o.tracer.Start(parent, "process "+c.Kind, start...)

	claimAttrs := []attribute.KeyValue{semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("claim"), ReclaimedKey.Bool(c.Reclaimed)}
	waited := !c.Reclaimed && !c.DueAt.IsZero()
	if waited {
		claimAttrs = append(claimAttrs, QueueWaitKey.Float64(info.Wait.Seconds()))
	}
	_, claim := o.tracer.Start(ctx, "claim", trace.WithTimestamp(info.Sent),
		trace.WithAttributes(attrs...), trace.WithAttributes(claimAttrs...))
	claim.End(trace.WithTimestamp(info.Returned))

	st := &attemptState{
		span:    span,
		attrs:   attrs,
		metrics: metric.WithAttributeSet(attribute.NewSet(KindKey.String(c.Kind), QueueKey.String(c.Queue))),
	}
	o.ins.claimed.Add(ctx, 1, st.metrics)
	if c.Reclaimed {
		o.ins.reclaimed.Add(ctx, 1, st.metrics)
	}
	if waited {
		o.ins.queueWait.Record(ctx, info.Wait.Seconds(), st.metrics)
	}
	return context.WithValue(ctx, o, st)
}

func (o *observer) handlerReturned(ctx context.Context, c *leasework.Claim, info framework.HandlerInfo) {
	st := o.state(ctx)
	if st == nil {
		return
	}
	returned := info.Started.Add(info.Ran)
	st.mu.Lock()
	if st.ended { // the worker settled the claim first (it stopped)
		st.mu.Unlock()
		return
	}
	st.returned = returned
	var text string
	failed := false
	if info.Err != nil {
		text, failed = describe(info.Err)
	}
	st.errored = st.errored || failed
	st.mu.Unlock()

	o.ins.runTime.Record(ctx, info.Ran.Seconds(), st.metrics)
	event := []attribute.KeyValue{attribute.Float64("leasework.run_time", info.Ran.Seconds())}
	if info.Cause != nil {
		st.span.SetAttributes(CauseKey.String(info.Cause.Error()))
		event = append(event, CauseKey.String(info.Cause.Error()))
		if loss := leaseLoss(info.Cause); loss != "" {
			o.ins.leaseLosses.Add(ctx, 1, st.metrics, metric.WithAttributes(LeaseLossKey.String(loss)))
		}
	}
	st.span.AddEvent("handler returned", trace.WithTimestamp(returned), trace.WithAttributes(event...))
	if failed {
		// As span.RecordError, which would call the error's methods
		// unguarded.
		st.span.AddEvent(semconv.ExceptionEventName, trace.WithTimestamp(returned), trace.WithAttributes(
			semconv.ExceptionType(fmt.Sprintf("%T", info.Err)), semconv.ExceptionMessage(text)))
		st.span.SetStatus(codes.Error, text)
	}
}

// describe returns the text of a handler's error and whether it is a
// failure (a snooze is not), without letting a panic of the error's methods
// out: the worker contains such errors (a nil pointer returned as an error,
// say), and its observer must not crash on them either.
func describe(err error) (text string, failed bool) {
	defer func() {
		if r := recover(); r != nil {
			text, failed = fmt.Sprintf("the handler's error (a %T) panicked when read: %v", err, r), true
		}
	}()
	var snooze *leasework.SnoozeError
	if errors.As(err, &snooze) && !leasework.IsPermanent(err) {
		return err.Error(), false
	}
	return err.Error(), true
}

func (o *observer) settled(ctx context.Context, c *leasework.Claim, s framework.Settlement) {
	st := o.state(ctx)
	if st == nil {
		return
	}
	now := time.Now()
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	from, errored := st.returned, st.errored
	st.mu.Unlock()
	if from.IsZero() { // the handler never returned, or never started
		from = now
	}

	outcome := OutcomeKey.String(s.Outcome.String())
	attrs := []attribute.KeyValue{outcome, semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName(s.Outcome.String())}
	if s.InHandlerTx {
		attrs = append(attrs, attribute.Bool("leasework.in_handler_tx", true))
	}
	if s.Cancelled {
		attrs = append(attrs, attribute.Bool("leasework.cancelled", true))
	}
	if s.Replayed {
		attrs = append(attrs, attribute.Bool("leasework.replayed", true))
	}
	if s.Delay > 0 {
		attrs = append(attrs, attribute.Float64("leasework.delay_seconds", s.Delay.Seconds()))
	}
	_, span := o.tracer.Start(trace.ContextWithSpan(ctx, st.span), "outcome", trace.WithTimestamp(from),
		trace.WithAttributes(st.attrs...), trace.WithAttributes(attrs...))
	if desc := failure(s); desc != "" {
		span.SetStatus(codes.Error, desc)
		if !errored {
			st.span.SetStatus(codes.Error, desc)
		}
	}
	span.End(trace.WithTimestamp(now))
	st.span.SetAttributes(outcome)
	st.span.End(trace.WithTimestamp(now))

	if counter := o.ins.outcomes[s.Outcome]; counter != nil {
		counter.Add(ctx, 1, st.metrics)
	}
}

// failure describes an outcome that is an error for the attempt, and is ""
// for the others.
func failure(s framework.Settlement) string {
	switch s.Outcome {
	case framework.OutcomeFailed:
		return "failed: " + s.Error
	case framework.OutcomeRejected:
		if s.Cancelled {
			return "rejected: the event was cancelled"
		}
		return "rejected: the claim was no longer owned"
	case framework.OutcomeAbandoned:
		return "abandoned: " + s.Error
	}
	return ""
}
