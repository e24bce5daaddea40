package leaseworkotel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// A store whose enqueues are traced and a worker whose claims are: the
// attempt continues the trace of the request that enqueued the event.
// Here the spans go to an in-memory recorder and are printed as a tree;
// an application passes its own providers, or sets the global ones.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	opts := []leaseworkotel.Option{leaseworkotel.WithTracerProvider(tp), leaseworkotel.WithMeterProvider(mp)}

	db, err := pgx.New().Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	schema := "example_otel_" + strconv.Itoa(os.Getpid())

	// The enqueuing side: the middleware on the store.
	store, err := lease.New(db, pgx.New(), lease.Options{
		Schema:            schema,
		EnqueueMiddleware: []lease.EnqueueMiddleware{leaseworkotel.EnqueueMiddleware(opts...)},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	defer store.DropSchema(context.Background())

	// The worker's side: the observer on the worker.
	w, err := framework.New(db, pgx.New(), framework.Config{Schema: schema, Concurrency: 1})
	if err != nil {
		log.Fatal(err)
	}
	if err := leaseworkotel.Instrument(w, opts...); err != nil {
		log.Fatal(err)
	}
	err = w.Register("greet", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		_, span := tp.Tracer("app").Start(ctx, "say hello") // a child of the attempt's span
		defer span.End()
		stop()
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		log.Fatal(err)
	}

	// A request enqueues in its transaction.
	reqCtx, request := tp.Tracer("app").Start(ctx, "request")
	tx, err := db.BeginTx(reqCtx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Enqueue(reqCtx, tx, lease.Event{Kind: "greet", Payload: []byte("Ada")}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	request.End()

	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	printTree(spans.Ended())
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			fmt.Printf("%s %d\n", m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// request
	//   enqueue greet
	//     process greet
	//       claim
	//       outcome
	//       say hello
	// leasework.claimed 1
	// leasework.completed 1
	// leasework.claims_held_back 0
}

// printTree prints spans as a tree, one name a line, children indented
// under their parent in the order of their names.
func printTree(spans []sdktrace.ReadOnlySpan) {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
	}
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int { return strings.Compare(a.Name(), b.Name()) })
		for _, s := range kids {
			fmt.Println(strings.Repeat("  ", depth) + s.Name())
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	walk(trace.SpanID{}, 0)
}
