package leaseworkotel_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The tests run against a real PostgreSQL: $LEASEWORK_DSN, or a throwaway
// cluster started once for this test binary.
func TestMain(m *testing.M) { pgtest.Main(m) }

// telemetry is an SDK tracer provider recording every span in memory and
// a meter provider read on demand.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t testing.TB) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		ctx := context.Background()
		tel.tp.Shutdown(ctx)
		tel.mp.Shutdown(ctx)
	})
	return tel
}

// options are the options that point leaseworkotel at tel.
func (tel *telemetry) options(more ...leaseworkotel.Option) []leaseworkotel.Option {
	return append([]leaseworkotel.Option{
		leaseworkotel.WithTracerProvider(tel.tp), leaseworkotel.WithMeterProvider(tel.mp),
	}, more...)
}

// ended returns the ended spans named name, in the order they ended.
func (tel *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans named name have ended and returns them.
func (tel *telemetry) waitSpans(t testing.TB, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	waitFor(t, "spans named "+name, func() bool { return len(tel.ended(name)) >= n })
	spans := tel.ended(name)
	if len(spans) != n {
		t.Fatalf("%d spans named %q, want %d", len(spans), name, n)
	}
	return spans
}

// metrics collects the metrics recorded so far.
func (tel *telemetry) metrics(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != leaseworkotel.ScopeName {
			t.Errorf("metrics of scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// newStore returns a migrated store in a fresh schema, with mw around its
// enqueues.
func newStore(t testing.TB, drv leasework.Driver, mw ...lease.EnqueueMiddleware) *lease.Store {
	t.Helper()
	return pgtest.Store(t, drv, lease.Options{EnqueueMiddleware: mw})
}

// newWorker makes a worker on s's table that polls often.
func newWorker(t testing.TB, s *lease.Store, cfg framework.Config) *framework.Worker {
	t.Helper()
	cfg.Schema, cfg.Table = s.Schema(), s.Table()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := framework.New(s.DB(), s.Driver(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// register registers h for kind with p, failing the test on error.
func register(t testing.TB, w *framework.Worker, kind string, p framework.RetryPolicy, h leasework.HandlerFunc) {
	t.Helper()
	if err := w.Register(kind, h, p); err != nil {
		t.Fatal(err)
	}
}

// fastRetry retries at once, or nearly.
var fastRetry = framework.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, RandomizationFactor: -1}

// start runs w under ctx until the returned stop is called (or the test
// ends); stop waits for Run to return.
func start(t testing.TB, ctx context.Context, w *framework.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("Run did not return within a minute of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitTimeout bounds every wait for a condition; reaching it fails the test.
const waitTimeout = 30 * time.Second

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv waits for a value on ch.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// attr returns the value of a span's attribute, and whether it has it.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkAttrs reports each attribute of want that s lacks or has with
// another value.
func checkAttrs(t testing.TB, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		got, ok := attr(s, kv.Key)
		if !ok {
			t.Errorf("span %q: no attribute %s (want %s)", s.Name(), kv.Key, kv.Value.String())
		} else if got != kv.Value {
			t.Errorf("span %q: %s = %s, want %s", s.Name(), kv.Key, got.String(), kv.Value.String())
		}
	}
}

// childrenOf returns the spans of spans whose parent is p.
func childrenOf(spans []sdktrace.ReadOnlySpan, p trace.SpanContext) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == p.SpanID() && s.Parent().TraceID() == p.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

// names returns the names of spans, sorted.
func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	slices.Sort(out)
	return out
}
