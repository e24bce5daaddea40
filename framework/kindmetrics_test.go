package framework_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The metrics handler serves, per kind and queue, the claims, the outcomes
// and histograms of queue wait and run time, with values that add up to
// the run.
func TestMetricsPerKindAndQueue(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{WorkerID: "w", PollInterval: 20 * time.Millisecond,
		Queues: []framework.Queue{{Name: lease.DefaultQueue}, {Name: "mail"}}})
	register(t, w, "ok", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	register(t, w, "flaky", framework.RetryPolicy{InitialInterval: time.Millisecond, MaxAttempts: 2},
		func(ctx context.Context, c *leasework.Claim) error {
			return errors.New("always")
		})
	pgtest.Enqueue(t, s,
		lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok", Queue: "mail"},
		lease.Event{Kind: "flaky", Queue: "mail"})
	stop := start(t, w)
	waitFor(t, "the outcomes", func() bool { c := w.Counters(); return c.Completed == 3 && c.Failed == 1 })
	stop()

	rec := httptest.NewRecorder()
	w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"# TYPE leasework_kind_claimed_total counter\n",
		`leasework_kind_claimed_total{worker="w",kind="ok",queue="default"} 2` + "\n",
		`leasework_kind_claimed_total{worker="w",kind="ok",queue="mail"} 1` + "\n",
		`leasework_kind_claimed_total{worker="w",kind="flaky",queue="mail"} 2` + "\n",
		`leasework_kind_outcomes_total{worker="w",kind="ok",queue="default",outcome="completed"} 2` + "\n",
		`leasework_kind_outcomes_total{worker="w",kind="flaky",queue="mail",outcome="retried"} 1` + "\n",
		`leasework_kind_outcomes_total{worker="w",kind="flaky",queue="mail",outcome="failed"} 1` + "\n",
		"# TYPE leasework_queue_wait_seconds histogram\n",
		`leasework_queue_wait_seconds_bucket{worker="w",kind="ok",queue="default",le="+Inf"} 2` + "\n",
		`leasework_queue_wait_seconds_count{worker="w",kind="flaky",queue="mail"} 2` + "\n",
		"# TYPE leasework_run_seconds histogram\n",
		`leasework_run_seconds_count{worker="w",kind="ok",queue="mail"} 1` + "\n",
		`leasework_run_seconds_bucket{worker="w",kind="ok",queue="default",le="600"} 2` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
