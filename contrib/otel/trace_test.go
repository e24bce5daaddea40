package leaseworkotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// traced is what one test run of an event through enqueue and worker left.
type traced struct {
	request  trace.SpanContext // the enqueuing request's span
	enqueue  sdktrace.ReadOnlySpan
	attempts []sdktrace.ReadOnlySpan // in attempt order
	rowID    int64
	worker   string   // the worker's id
	baggage  []string // the "tenant" baggage member each attempt's handler saw
	all      []sdktrace.ReadOnlySpan
}

// runTraced enqueues one event of kind "email" to queue "mail" in a
// transaction under a "request" span (with baggage tenant=acme), through
// the middleware when withMiddleware, and runs a worker instrumented with
// opts under runCtx until the event completes. The handler starts a span
// "send email" from its context and fails its first attempt when retry.
func runTraced(t *testing.T, drv leasework.Driver, tel *telemetry, withMiddleware, retry bool, runCtx context.Context, opts ...leaseworkotel.Option) traced {
	t.Helper()
	var mw []lease.EnqueueMiddleware
	if withMiddleware {
		mw = append(mw, leaseworkotel.EnqueueMiddleware(tel.options()...))
	}
	s := newStore(t, drv, mw...)
	w := newWorker(t, s, framework.Config{Queues: []framework.Queue{{Name: "mail"}}})
	if err := leaseworkotel.Instrument(w, tel.options(opts...)...); err != nil {
		t.Fatal(err)
	}
	tenants := make(chan string, 2)
	register(t, w, "email", fastRetry, func(ctx context.Context, c *leasework.Claim) error {
		_, span := tel.tp.Tracer("handler").Start(ctx, "send email")
		defer span.End()
		tenants <- baggage.FromContext(ctx).Member("tenant").Value()
		if retry && c.Attempt == 1 {
			return errors.New("smtp busy")
		}
		return nil
	})

	member, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := tel.tp.Tracer("app").Start(baggage.ContextWithBaggage(context.Background(), bag), "request")
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.Enqueue(ctx, tx, lease.Event{Kind: "email", EventID: "welcome-1", Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	request.End()

	n := 1
	if retry {
		n = 2
	}
	stop := start(t, runCtx, w)
	attempts := tel.waitSpans(t, "process email", n)
	stop()
	slices.SortFunc(attempts, func(a, b sdktrace.ReadOnlySpan) int {
		x, _ := attr(a, leaseworkotel.AttemptKey)
		y, _ := attr(b, leaseworkotel.AttemptKey)
		return int(x.AsInt64() - y.AsInt64())
	})
	r := traced{request: request.SpanContext(), attempts: attempts, rowID: out[0].ID, worker: w.ID(), all: tel.spans.Ended()}
	if withMiddleware {
		r.enqueue = tel.waitSpans(t, "enqueue email", 1)[0]
	}
	for range n {
		r.baggage = append(r.baggage, recv(t, tenants, "the handler's baggage"))
	}
	return r
}

// checkAttempt checks an attempt span and the spans under it: "claim",
// "outcome" and the handler's "send email", each carrying the claim's
// attributes.
func checkAttempt(t *testing.T, r traced, a sdktrace.ReadOnlySpan, attempt int, outcome string) {
	t.Helper()
	claimAttrs := []attribute.KeyValue{
		leaseworkotel.EventIDKey.String("welcome-1"),
		leaseworkotel.KindKey.String("email"),
		leaseworkotel.QueueKey.String("mail"),
		leaseworkotel.GenerationKey.Int(attempt), // one claim per attempt here
		leaseworkotel.AttemptKey.Int(attempt),
		leaseworkotel.IDKey.Int64(r.rowID),
	}
	if a.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("attempt %d: span kind %v, want consumer", attempt, a.SpanKind())
	}
	checkAttrs(t, a, append(claimAttrs,
		attribute.String("messaging.system", "leasework"),
		attribute.String("messaging.destination.name", "mail"),
		attribute.String("messaging.message.id", "welcome-1"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.client.id", r.worker),
		leaseworkotel.OutcomeKey.String(outcome))...)
	children := childrenOf(r.all, a.SpanContext())
	if got, want := names(children), []string{"claim", "outcome", "send email"}; !slices.Equal(got, want) {
		t.Fatalf("attempt %d: children %q, want %q", attempt, got, want)
	}
	for _, c := range children {
		if c.Name() == "send email" {
			continue
		}
		checkAttrs(t, c, claimAttrs...)
		if c.StartTime().Before(a.StartTime()) || c.EndTime().After(a.EndTime()) {
			t.Errorf("attempt %d: span %q from %v to %v, outside its parent's %v to %v",
				attempt, c.Name(), c.StartTime(), c.EndTime(), a.StartTime(), a.EndTime())
		}
		if c.Name() == "outcome" {
			checkAttrs(t, c, leaseworkotel.OutcomeKey.String(outcome))
		}
		if c.Name() == "claim" {
			if _, ok := attr(c, leaseworkotel.QueueWaitKey); !ok {
				t.Errorf("attempt %d: the claim span has no queue wait", attempt)
			}
		}
	}
}

// The acceptance test of the trace: a span in the enqueuing transaction's
// context is the grandparent of each attempt's span: request -> enqueue
// -> attempt -> claim, outcome and the handler's own span. The baggage of
// the request reaches the handler too. A retried attempt is a second child
// of the same enqueue span, marked as an error.
func TestTraceContinuesFromEnqueueToAttempt(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		tel := newTelemetry(t)
		r := runTraced(t, drv, tel, true, true, context.Background())

		if r.enqueue.Parent().SpanID() != r.request.SpanID() || r.enqueue.SpanContext().TraceID() != r.request.TraceID() {
			t.Errorf("the enqueue span's parent is %v, want the request %v", r.enqueue.Parent(), r.request)
		}
		if r.enqueue.SpanKind() != trace.SpanKindProducer {
			t.Errorf("enqueue span kind %v, want producer", r.enqueue.SpanKind())
		}
		checkAttrs(t, r.enqueue,
			attribute.String("messaging.system", "leasework"),
			attribute.String("messaging.destination.name", "mail"),
			attribute.String("messaging.message.id", "welcome-1"),
			attribute.String("messaging.operation.type", "send"),
			leaseworkotel.EventIDKey.String("welcome-1"),
			leaseworkotel.IDKey.Int64(r.rowID),
			leaseworkotel.KindKey.String("email"),
			leaseworkotel.QueueKey.String("mail"),
			leaseworkotel.EventCountKey.Int(1),
			leaseworkotel.DuplicatesKey.Int(0),
			leaseworkotel.KindsKey.StringSlice([]string{"email"}),
		)

		for i, a := range r.attempts {
			if a.SpanContext().TraceID() != r.request.TraceID() {
				t.Errorf("attempt %d: trace %v, want the request's %v", i+1, a.SpanContext().TraceID(), r.request.TraceID())
			}
			if a.Parent().SpanID() != r.enqueue.SpanContext().SpanID() || !a.Parent().IsRemote() {
				t.Errorf("attempt %d: parent %v, want the enqueue span %v (remote)", i+1, a.Parent(), r.enqueue.SpanContext())
			}
			if len(a.Links()) != 0 {
				t.Errorf("attempt %d: links %v, want none", i+1, a.Links())
			}
		}
		checkAttempt(t, r, r.attempts[0], 1, "retried")
		checkAttempt(t, r, r.attempts[1], 2, "completed")
		if st := r.attempts[0].Status(); st.Code != codes.Error || st.Description != "smtp busy" {
			t.Errorf("the failed attempt's status is %v, want an error, smtp busy", st)
		}
		if st := r.attempts[1].Status(); st.Code != codes.Unset {
			t.Errorf("the completed attempt's status is %v, want unset", st)
		}
		if !slices.Equal(r.baggage, []string{"acme", "acme"}) {
			t.Errorf("the handlers saw tenants %q in their baggage, want acme twice", r.baggage)
		}
	})
}

// WithLinkToEnqueue: the attempt starts a trace of its own, linked to the
// enqueue span.
func TestLinkToEnqueue(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		tel := newTelemetry(t)
		r := runTraced(t, drv, tel, true, false, context.Background(), leaseworkotel.WithLinkToEnqueue())
		a := r.attempts[0]
		if a.SpanContext().TraceID() == r.request.TraceID() || a.Parent().IsValid() {
			t.Errorf("the attempt is in trace %v with parent %v; want a new root", a.SpanContext().TraceID(), a.Parent())
		}
		links := a.Links()
		if len(links) != 1 || links[0].SpanContext.SpanID() != r.enqueue.SpanContext().SpanID() ||
			links[0].SpanContext.TraceID() != r.request.TraceID() {
			t.Errorf("the attempt's links are %v; want one, to the enqueue span %v", links, r.enqueue.SpanContext())
		}
		checkAttempt(t, r, a, 1, "completed")
		if !slices.Equal(r.baggage, []string{"acme"}) {
			t.Errorf("the handler saw tenants %q in its baggage, want acme", r.baggage)
		}
	})
}

// An event enqueued without the middleware has no trace context: its
// attempt is a root span, never the child of a span in the context given
// to Run.
func TestAttemptWithoutTraceContextIsARoot(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		tel := newTelemetry(t)
		runCtx, run := tel.tp.Tracer("app").Start(context.Background(), "run")
		defer run.End()
		r := runTraced(t, drv, tel, false, false, runCtx)
		a := r.attempts[0]
		if a.Parent().IsValid() || a.SpanContext().TraceID() == run.SpanContext().TraceID() ||
			a.SpanContext().TraceID() == r.request.TraceID() {
			t.Errorf("the attempt has parent %v in trace %v; want a root of a trace of its own", a.Parent(), a.SpanContext().TraceID())
		}
		if len(a.Links()) != 0 {
			t.Errorf("the attempt's links are %v; want none", a.Links())
		}
		checkAttempt(t, r, a, 1, "completed")
		if !slices.Equal(r.baggage, []string{""}) {
			t.Errorf("the handler saw tenants %q in its baggage, want none", r.baggage)
		}
	})
}

// nilErr is an error whose Error method panics on a nil pointer.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// A handler that returns a nil pointer as its error: the worker replaces
// it, for its observers too, by an error saying so, and the attempt is
// marked with it.
func TestHandlerErrorThatPanics(t *testing.T) {
	tel := newTelemetry(t)
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{})
	if err := leaseworkotel.Instrument(w, tel.options()...); err != nil {
		t.Fatal(err)
	}
	register(t, w, "nil", framework.RetryPolicy{MaxAttempts: 1}, func(ctx context.Context, c *leasework.Claim) error {
		var e *nilErr
		return e
	})
	pgtest.Enqueue(t, s, lease.Event{Kind: "nil"})
	stop := start(t, context.Background(), w)
	a := tel.waitSpans(t, "process nil", 1)[0]
	stop()
	if st := a.Status(); st.Code != codes.Error || !strings.Contains(st.Description, "returned a nil *leaseworkotel_test.nilErr") {
		t.Errorf("the attempt's status is %v; want an error saying the handler returned a nil pointer", st)
	}
	checkAttrs(t, a, leaseworkotel.OutcomeKey.String("failed"))
	var recorded bool
	for _, e := range a.Events() {
		recorded = recorded || e.Name == "exception"
	}
	if !recorded {
		t.Errorf("no exception event on the attempt span: %v", a.Events())
	}
}
