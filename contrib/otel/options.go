package leaseworkotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/leasework/leasework/contrib/otel"

// An Option configures [EnqueueMiddleware], [Observer] and [Instrument].
type Option func(*config)

type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagator     propagation.TextMapPropagator
	link           bool
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	return c
}

// WithTracerProvider sets the provider of the tracer. Nil, or no option,
// means the global one (otel.GetTracerProvider), which is a no-op until the
// application sets one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets the provider of the meter. Nil, or no option,
// means the global one (otel.GetMeterProvider), which is a no-op until the
// application sets one. The enqueue middleware records no metrics and
// ignores it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithPropagator sets how the enqueuer's trace context is written into an
// event's metadata and read back from a claim's. Nil, or no option, means
// the global propagator (otel.GetTextMapPropagator) when the application
// has set one, and otherwise W3C trace context and baggage (see
// "Propagation" in the package doc). The enqueuing and the claiming side
// must agree.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithLinkToEnqueue makes each attempt span the root of a new trace, linked
// to the enqueue span, instead of its child. Use it when events wait long
// (delayed events, retries hours later), so that the enqueuing request's
// trace does not stretch over the wait, or when one enqueue fans out to
// more attempts than a trace should hold. The enqueue middleware ignores
// it.
func WithLinkToEnqueue() Option {
	return func(c *config) { c.link = true }
}

// defaultPropagator is used when neither WithPropagator nor the
// application chose one.
var defaultPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// textMapPropagator returns the propagator to use now: the global one is
// read at each use, so that one set after the middleware or observer was
// made is honoured.
func (c *config) textMapPropagator() propagation.TextMapPropagator {
	if c.propagator != nil {
		return c.propagator
	}
	if p := otel.GetTextMapPropagator(); len(p.Fields()) > 0 {
		return p
	}
	// The global propagator is a no-op until the application sets one:
	// with it, no trace would cross the queue.
	return defaultPropagator
}

func (c *config) tracer() trace.Tracer {
	return c.tracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

func (c *config) meter() metric.Meter {
	return c.meterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
}
