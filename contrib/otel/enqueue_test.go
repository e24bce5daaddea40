package leaseworkotel_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The middleware adds the trace context to copies of the events' metadata:
// the caller's maps are left alone, their other keys are stored as given,
// and an event whose metadata would grow too large is stored without it.
func TestEnqueueKeepsTheCallersMetadata(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv, leaseworkotel.EnqueueMiddleware(tel.options()...))
		tenant := map[string]string{"tenant": "acme", "correlation": "c-7"}
		big := map[string]string{"blob": strings.Repeat("x", lease.MaxMetadataBytes-len("blob")-10)}
		events := []lease.Event{
			{Kind: "a", EventID: "with-metadata", Metadata: tenant},
			{Kind: "b", EventID: "without", Queue: "other"},
			{Kind: "a", EventID: "big", Metadata: big},
		}
		out := pgtest.Enqueue(t, s, events...)

		if len(tenant) != 2 || events[1].Metadata != nil || len(big) != 1 {
			t.Errorf("the caller's metadata changed: %v, %v, %d keys", tenant, events[1].Metadata, len(big))
		}
		span := tel.waitSpans(t, "enqueue", 1)[0] // two kinds: no kind in the name
		checkAttrs(t, span,
			leaseworkotel.EventCountKey.Int(3),
			leaseworkotel.KindsKey.StringSlice([]string{"a", "b"}),
			leaseworkotel.QueuesKey.StringSlice([]string{"default", "other"}),
			attribute.Int("messaging.batch.message_count", 3),
		)
		for _, k := range []attribute.Key{leaseworkotel.KindKey, leaseworkotel.QueueKey, "messaging.destination.name", leaseworkotel.EventIDKey} {
			if v, ok := attr(span, k); ok {
				t.Errorf("a span of several kinds, queues and events has %s = %s", k, v.String())
			}
		}

		stored := func(i int) map[string]string {
			row, err := s.Get(ctx, out[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			return row.Metadata
		}
		for i, want := range []map[string]string{tenant, nil} {
			got := stored(i)
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(got)))
			if sc.SpanID() != span.SpanContext().SpanID() || sc.TraceID() != span.SpanContext().TraceID() {
				t.Errorf("event %d: the stored trace context is %v, want the enqueue span's %v", i, sc, span.SpanContext())
			}
			delete(got, "traceparent")
			if !maps.Equal(got, want) {
				t.Errorf("event %d: stored metadata %v besides traceparent, want %v", i, got, want)
			}
		}
		if got := stored(2); !maps.Equal(got, big) {
			t.Errorf("the event with the largest metadata: stored %d keys, want its own alone", len(got))
		}
		var skipped bool
		for _, e := range span.Events() {
			skipped = skipped || strings.Contains(e.Name, "trace context not stored")
		}
		if !skipped {
			t.Errorf("the span does not say the trace context of an event was not stored: events %v", span.Events())
		}
	})
}

// A failed enqueue marks its span as an error; a skipped duplicate is
// counted.
func TestEnqueueErrors(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	s := newStore(t, pgtest.Drivers[0].New(), leaseworkotel.EnqueueMiddleware(tel.options()...))
	pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "one"})

	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "a", EventID: "x", MaxAttempts: -1}); err == nil {
		t.Fatal("an event with MaxAttempts -1 was enqueued")
	}
	out, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true}, lease.Event{Kind: "a", EventID: "one"})
	if err != nil || !out[0].Duplicate {
		t.Fatalf("enqueue of a duplicate, skipping duplicates: %v, %v", out, err)
	}
	spans := tel.waitSpans(t, "enqueue a", 3)
	if st := spans[1].Status(); st.Code != codes.Error || !strings.Contains(st.Description, "MaxAttempts") {
		t.Errorf("the failed enqueue's span has status %v, want an error naming MaxAttempts", st)
	}
	checkAttrs(t, spans[2], leaseworkotel.DuplicatesKey.Int(1))
	checkAttrs(t, spans[0], leaseworkotel.DuplicatesKey.Int(0))
}

// The propagator: WithPropagator's, else the global one once the
// application set it, else W3C trace context and baggage (the global
// default is a no-op, which would carry nothing).
func TestPropagatorChoice(t *testing.T) {
	tel := newTelemetry(t)
	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tel.tp.Tracer("app").Start(baggage.ContextWithBaggage(context.Background(), bag), "request")
	defer span.End()
	// keys returns the metadata keys the middleware made with opts give
	// to an event.
	keys := func(opts ...leaseworkotel.Option) []string {
		var got []string
		next := func(ctx context.Context, events []lease.Event) ([]lease.Enqueued, error) {
			got = slices.Sorted(maps.Keys(events[0].Metadata))
			return []lease.Enqueued{{ID: 1, EventID: "e"}}, nil
		}
		mw := leaseworkotel.EnqueueMiddleware(append(tel.options(), opts...)...)
		if _, err := mw(next)(ctx, []lease.Event{{Kind: "k", Metadata: map[string]string{"own": "x"}}}); err != nil {
			t.Fatal(err)
		}
		return got
	}

	if got, want := keys(), []string{"baggage", "own", "traceparent"}; !slices.Equal(got, want) {
		t.Errorf("the default propagator with no global one wrote %q, want %q", got, want)
	}
	if got, want := keys(leaseworkotel.WithPropagator(propagation.TraceContext{})), []string{"own", "traceparent"}; !slices.Equal(got, want) {
		t.Errorf("WithPropagator(TraceContext) wrote %q, want %q", got, want)
	}
	// Back to a no-op, as the global propagator is by default.
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	otel.SetTextMapPropagator(propagation.Baggage{})
	if got, want := keys(), []string{"baggage", "own"}; !slices.Equal(got, want) {
		t.Errorf("with the global propagator set to Baggage, wrote %q, want %q", got, want)
	}
}
