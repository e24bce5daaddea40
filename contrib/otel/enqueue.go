package leaseworkotel

import (
	"context"
	"maps"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework/lease"
)

// EnqueueMiddleware returns a middleware for lease.Options.EnqueueMiddleware
// that traces each enqueue call with a producer span and writes that span's
// context into the metadata of every event of the call, so that the
// attempts of those events continue the enqueuer's trace (see the package
// doc). Of the options, it uses WithTracerProvider and WithPropagator.
//
// The span is named "enqueue <kind>", or "enqueue" when the call has
// events of several kinds. It ends when the enqueue returns, before the
// caller's transaction commits: an event whose transaction rolls back has
// an enqueue span and no attempt.
//
// The events passed on are copies: the caller's slice and metadata maps are
// never changed. The propagator's keys ("traceparent", "tracestate" and
// "baggage" by default) are set in each copy, replacing values the caller
// gave for them; the other keys are kept. An event whose metadata would
// then pass lease.MaxMetadataBytes is passed on without the trace context
// (and the span gets an event saying so) rather than failing the enqueue.
func EnqueueMiddleware(opts ...Option) lease.EnqueueMiddleware {
	cfg := newConfig(opts)
	tracer := cfg.tracer()
	return func(next lease.EnqueueFunc) lease.EnqueueFunc {
		return func(ctx context.Context, events []lease.Event) ([]lease.Enqueued, error) {
			kinds, queues := distinct(events, func(e lease.Event) string { return e.Kind }),
				distinct(events, func(e lease.Event) string { return queueOf(e.Queue) })
			name := "enqueue"
			attrs := []attribute.KeyValue{
				messagingSystem,
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("enqueue"),
				EventCountKey.Int(len(events)),
				KindsKey.StringSlice(kinds),
				QueuesKey.StringSlice(queues),
			}
			if len(events) > 1 {
				attrs = append(attrs, semconv.MessagingBatchMessageCount(len(events)))
			}
			if len(kinds) == 1 {
				name += " " + kinds[0]
				attrs = append(attrs, KindKey.String(kinds[0]))
			}
			if len(queues) == 1 {
				attrs = append(attrs, QueueKey.String(queues[0]), semconv.MessagingDestinationName(queues[0]))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()

			prop := cfg.textMapPropagator()
			out := slices.Clone(events)
			for i := range out {
				out[i].Metadata = withTraceContext(ctx, prop, out[i].Metadata, span, i)
			}
			enqueued, err := next(ctx, out)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return enqueued, err
			}
			duplicates := 0
			for _, e := range enqueued {
				if e.Duplicate {
					duplicates++
				}
			}
			span.SetAttributes(DuplicatesKey.Int(duplicates))
			if len(enqueued) == 1 {
				span.SetAttributes(EventIDKey.String(enqueued[0].EventID), semconv.MessagingMessageID(enqueued[0].EventID))
				if enqueued[0].ID != 0 {
					span.SetAttributes(IDKey.Int64(enqueued[0].ID))
				}
			}
			return enqueued, nil
		}
	}
}

// withTraceContext returns a copy of md with ctx's trace context injected,
// or md itself when the result would be too large to enqueue.
func withTraceContext(ctx context.Context, prop propagation.TextMapPropagator, md map[string]string, span trace.Span, i int) map[string]string {
	carrier := propagation.MapCarrier{}
	prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return md
	}
	merged := make(map[string]string, len(md)+len(carrier))
	maps.Copy(merged, md)
	maps.Copy(merged, carrier)
	if size := lease.MetadataSize(merged); size > lease.MaxMetadataBytes {
		span.AddEvent("trace context not stored: the event's metadata would be too large",
			trace.WithAttributes(attribute.Int("leasework.event_index", i), attribute.Int("leasework.metadata_bytes", size)))
		return md
	}
	return merged
}

// queueOf is the queue an event is enqueued to.
func queueOf(q string) string {
	if q == "" {
		return lease.DefaultQueue
	}
	return q
}

// distinct returns the distinct values of f over events, sorted.
func distinct(events []lease.Event, f func(lease.Event) string) []string {
	seen := make(map[string]struct{}, 1)
	for _, e := range events {
		seen[f(e)] = struct{}{}
	}
	return slices.Sorted(maps.Keys(seen))
}
