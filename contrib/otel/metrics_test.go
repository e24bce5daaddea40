package leaseworkotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// series names one series of a metric: kind/queue, and any other
// attributes as key=value, sorted.
func series(set attribute.Set) string {
	kind, _ := set.Value(leaseworkotel.KindKey)
	queue, _ := set.Value(leaseworkotel.QueueKey)
	name := kind.AsString() + "/" + queue.AsString()
	for _, kv := range set.ToSlice() {
		if kv.Key != leaseworkotel.KindKey && kv.Key != leaseworkotel.QueueKey {
			name += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.String())
		}
	}
	return name
}

// counts returns a counter's value per series, or a histogram's count.
func counts(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		if !data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s is not a cumulative counter", m.Name)
		}
		for _, p := range data.DataPoints {
			out[series(p.Attributes)] = p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range data.DataPoints {
			out[series(p.Attributes)] = int64(p.Count)
			if low, _ := p.Min.Value(); low < 0 {
				t.Errorf("%s %s: a negative duration", m.Name, series(p.Attributes))
			}
		}
	default:
		t.Errorf("%s: data of type %T", m.Name, m.Data)
	}
	return out
}

// The metrics after a known run: three events complete at once, one is
// retried then completes, one fails for good, and one is reclaimed after
// its first claim's lease expired while its handler ran, a claim whose
// handler then sees its lease lost and whose outcome is rejected as stale.
// Every counter and histogram count is checked per kind and queue, and
// against the worker's own counters.
func TestMetricsAfterAKnownRun(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{
			RenewEvery: 50 * time.Millisecond,
			Queues:     []framework.Queue{{Name: "default"}, {Name: "q2"}},
		})
		if err := leaseworkotel.Instrument(w, tel.options()...); err != nil {
			t.Fatal(err)
		}
		ok := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error { return nil })
		register(t, w, "ok", fastRetry, ok)
		register(t, w, "flaky", fastRetry, func(ctx context.Context, c *leasework.Claim) error {
			if c.Attempt == 1 {
				return errors.New("not yet")
			}
			return nil
		})
		register(t, w, "bad", fastRetry, func(ctx context.Context, c *leasework.Claim) error {
			return leasework.Permanent(errors.New("never"))
		})
		running := make(chan int64, 1)
		register(t, w, "slow", fastRetry, func(ctx context.Context, c *leasework.Claim) error {
			if c.Attempt > 1 {
				return nil
			}
			running <- c.ID
			<-ctx.Done() // until the worker finds the lease lost
			return context.Cause(ctx)
		})

		pgtest.Enqueue(t, s,
			lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"},
			lease.Event{Kind: "flaky", Queue: "q2"},
			lease.Event{Kind: "bad"},
			lease.Event{Kind: "slow"},
		)
		stop := start(t, ctx, w)
		id := recv(t, running, "the first claim of the slow event")
		if err := leasetest.ExpireLease(ctx, s, id); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "every event finished and the stale outcome rejected", func() bool {
			c := w.Counters()
			return c.Completed == 5 && c.Failed == 1 && c.StaleRejections == 1
		})
		stop()

		if c := w.Counters(); c.Claimed != 8 || c.Reclaimed != 1 || c.Retried != 1 || c.LeasesLost != 1 {
			t.Errorf("the worker's own counters: %+v", c)
		}
		m := tel.metrics(t)
		want := map[string]map[string]int64{
			"leasework.claimed":          {"ok/default": 3, "flaky/q2": 2, "bad/default": 1, "slow/default": 2},
			"leasework.reclaimed":        {"slow/default": 1},
			"leasework.completed":        {"ok/default": 3, "flaky/q2": 1, "slow/default": 1},
			"leasework.retried":          {"flaky/q2": 1},
			"leasework.failed":           {"bad/default": 1},
			"leasework.stale_rejections": {"slow/default": 1},
			"leasework.lease_losses":     {"slow/default leasework.lease_loss=lost": 1},
			"leasework.queue_wait":       {"ok/default": 3, "flaky/q2": 2, "bad/default": 1, "slow/default": 1},
			"leasework.run_time":         {"ok/default": 3, "flaky/q2": 2, "bad/default": 1, "slow/default": 2},
		}
		for _, name := range slices.Sorted(maps.Keys(want)) {
			got, ok := m[name]
			if !ok {
				t.Errorf("no metric %s", name)
				continue
			}
			if c := counts(t, got); !maps.Equal(c, want[name]) {
				t.Errorf("%s = %v, want %v", name, c, want[name])
			}
			unit := "{claim}"
			if strings.HasSuffix(name, "_time") || strings.HasSuffix(name, "_wait") {
				unit = "s"
			}
			if got.Unit != unit || got.Description == "" {
				t.Errorf("%s: unit %q, description %q; want unit %q and a description", name, got.Unit, got.Description, unit)
			}
		}
		for _, name := range []string{"leasework.snoozed", "leasework.released", "leasework.abandoned"} {
			if got, ok := m[name]; ok && len(counts(t, got)) != 0 {
				t.Errorf("%s = %v, want nothing", name, counts(t, got))
			}
		}

		// The slow event's two attempts, as spans: the lost one says why
		// its context ended and how its outcome settled.
		slow := tel.waitSpans(t, "process slow", 2)
		slices.SortFunc(slow, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		checkAttrs(t, slow[0],
			leaseworkotel.GenerationKey.Int(1), leaseworkotel.ReclaimedKey.Bool(false),
			leaseworkotel.CauseKey.String(leasework.ErrLeaseLost.Error()), leaseworkotel.OutcomeKey.String("rejected"))
		if st := slow[0].Status(); st.Code != codes.Error {
			t.Errorf("the lost attempt's status is %v, want an error", st)
		}
		checkAttrs(t, slow[1],
			leaseworkotel.GenerationKey.Int(2), leaseworkotel.AttemptKey.Int(2), leaseworkotel.ReclaimedKey.Bool(true),
			leaseworkotel.OutcomeKey.String("completed"))
		if _, ok := attr(slow[1], leaseworkotel.CauseKey); ok {
			t.Errorf("the reclaim's span has a cause, though its handler's context did not end early")
		}
	})
}

// Every outcome the framework knows has its counter: an outcome added to
// the framework without one here fails this test, not a user's dashboard.
func TestEveryOutcomeHasACounter(t *testing.T) {
	counted, err := leaseworkotel.OutcomesCounted()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range framework.Outcomes() {
		if !counted[o] {
			t.Errorf("outcome %s has no counter", o)
		}
	}
	if len(counted) != len(framework.Outcomes()) {
		t.Errorf("%d outcome counters for %d outcomes", len(counted), len(framework.Outcomes()))
	}
}
