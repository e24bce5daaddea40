package leasework_test

import (
	"errors"
	"expvar"
	"net/http"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go checks each snippet
// against its function. The names a snippet takes as given are the
// function's parameters.
var _ = []any{handlerResult, throttled, serveMetrics}

// handlerResult is how a handler ends (docs/workers.md, "Outcomes").
func handlerResult(err, errNoSuchAddress error) error {
	if errors.Is(err, errNoSuchAddress) {
		return leasework.Permanent(err) // FAILED now: retrying cannot help
	}
	return err // nil completes; an error is retried after the kind's backoff
}

// throttled is a handler that cannot run yet, or that was told when to
// come back (docs/workers.md, "Snooze and chosen delays").
func throttled(limiter interface{ Allow() bool }, resp *http.Response, errThrottled error, retryAfter func(*http.Response) time.Duration) error {
	if !limiter.Allow() {
		return leasework.Snooze(time.Minute) // again in a minute; not a failure, spends no attempt
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return leasework.RetryAfter(errThrottled, retryAfter(resp)) // a failure, retried after the server's delay
	}
	return nil
}

// serveMetrics serves a worker's figures (docs/workers.md, "Metrics"). It
// is here rather than in framework's tests, which must not import expvar:
// expvar serves /debug/vars on the default mux, and
// TestNothingRegisteredOnTheDefaultMux checks that a program importing
// framework serves nothing there.
func serveMetrics(mux *http.ServeMux, w *framework.Worker) {
	mux.Handle("/metrics", w.MetricsHandler(0)) // counters, per-kind series, the table's Stats
	expvar.Publish("leasework", expvar.Func(func() any { return w.Counters() }))
}
