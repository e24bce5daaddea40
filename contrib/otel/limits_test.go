package leaseworkotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// points returns an int64 gauge's or counter's value per series: the
// values of keys, joined with "/".
func points(t *testing.T, m metricdata.Metrics, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	var dps []metricdata.DataPoint[int64]
	switch data := m.Data.(type) {
	case metricdata.Gauge[int64]:
		dps = data.DataPoints
	case metricdata.Sum[int64]:
		if !data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s is not a cumulative counter", m.Name)
		}
		dps = data.DataPoints
	default:
		t.Fatalf("%s: data of type %T", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, p := range dps {
		var name []string
		for _, k := range keys {
			v, _ := p.Attributes.Value(k)
			name = append(name, v.String())
		}
		out[strings.Join(name, "/")] = p.Value
	}
	return out
}

// errorsHandled records the errors given to otel.Handle.
type errorsHandled struct {
	mu   sync.Mutex
	errs []error
}

func (h *errorsHandled) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

func (h *errorsHandled) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// ObserveLimits observes each limit's live attempts, maximum and held-back
// events, read from the database at the collection; without the limits'
// table, leasework.limits.up is 0, the error goes to otel.Handle, and no
// limit is observed. Instrument observes the worker's claims that a limit
// held back.
func TestLimitMetrics(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv)
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "slow", Max: 1}, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeQueue, Name: "bulk", Max: 4}, "test"); err != nil {
			t.Fatal(err)
		}
		reg, err := leaseworkotel.ObserveLimits(s, tel.options()...)
		if err != nil {
			t.Fatal(err)
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "slow"}, lease.Event{Kind: "slow"}, lease.Event{Kind: "slow"},
			lease.Event{Kind: "fast"}, lease.Event{Kind: "fast"})
		w := newWorker(t, s, framework.Config{WorkerID: "w1", Concurrency: 10})
		if err := leaseworkotel.Instrument(w, tel.options()...); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		started := make(chan struct{}, 3)
		register(t, w, "slow", fastRetry, func(ctx context.Context, _ *leasework.Claim) error {
			started <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		register(t, w, "fast", fastRetry, func(context.Context, *leasework.Claim) error { return nil })
		stop := start(t, ctx, w)
		waitFor(t, "a slow handler started and both fast events completed", func() bool {
			return len(started) == 1 && w.Counters().Completed == 2
		})

		m := tel.metrics(t)
		table := s.Schema() + ".events"
		byLimit := []attribute.Key{leaseworkotel.TableKey, leaseworkotel.LimitScopeKey, leaseworkotel.LimitNameKey}
		for name, want := range map[string]map[string]int64{
			"leasework.limits.up":       {table: 1},
			"leasework.limit.live":      {table + "/kind/slow": 1, table + "/queue/bulk": 0},
			"leasework.limit.max":       {table + "/kind/slow": 1, table + "/queue/bulk": 4},
			"leasework.limit.held_back": {table + "/kind/slow": 2, table + "/queue/bulk": 0},
		} {
			keys := byLimit
			if name == "leasework.limits.up" {
				keys = byLimit[:1]
			}
			if got := points(t, m[name], keys...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v; want %v", name, got, want)
			}
			if m[name].Description == "" || m[name].Unit == "" {
				t.Errorf("%s: unit %q, description %q; want both", name, m[name].Unit, m[name].Description)
			}
		}
		held := w.Counters().ClaimsHeldBack
		if held < 1 {
			t.Errorf("ClaimsHeldBack = %d; want at least 1", held)
		}
		want := map[string]int64{"w1": held}
		if got := points(t, m["leasework.claims_held_back"], semconv.MessagingClientIDKey); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("leasework.claims_held_back = %v; want %v, the worker's own count", got, want)
		}

		close(release)
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == 5 })
		stop()
		m = tel.metrics(t)
		if got := points(t, m["leasework.limit.live"], byLimit...); got[table+"/kind/slow"] != 0 {
			t.Errorf("leasework.limit.live once every event completed = %v; want 0 for kind slow", got)
		}

		// The limits cannot be read.
		handled := &errorsHandled{}
		defer otel.SetErrorHandler(otel.GetErrorHandler())
		otel.SetErrorHandler(handled)
		if _, err := s.DB().ExecContext(ctx, `DROP TABLE `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+"_limits")+` CASCADE`); err != nil {
			t.Fatal(err)
		}
		m = tel.metrics(t)
		if got := points(t, m["leasework.limits.up"], leaseworkotel.TableKey); got[table] != 0 || len(got) != 1 {
			t.Errorf("leasework.limits.up without the limits' table = %v; want 0", got)
		}
		if _, ok := m["leasework.limit.live"]; ok && len(points(t, m["leasework.limit.live"], byLimit...)) != 0 {
			t.Errorf("leasework.limit.live observed without the limits' table")
		}
		if errs := handled.all(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "read the concurrency limits") {
			t.Errorf("errors handled = %v; want the failed read of the limits", errs)
		}

		// Unregistered, nothing more is read or observed.
		if err := reg.Unregister(); err != nil {
			t.Fatal(err)
		}
		m = tel.metrics(t)
		if _, ok := m["leasework.limits.up"]; ok {
			t.Errorf("leasework.limits.up observed after Unregister")
		}
		if errs := handled.all(); len(errs) != 1 {
			t.Errorf("errors handled after Unregister = %v; want no more", errs)
		}
	})
}

// ObserveLimits observes the partition limits with the scope "partition":
// a partition's own limit by its name, the default of the partitions by an
// empty name, with the live attempts of every partition under it; held
// back counts the events each set aside.
func TestPartitionLimitMetrics(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv)
		for _, l := range []lease.Limit{{Scope: lease.ScopePartition, Name: "", Max: 1}, {Scope: lease.ScopePartition, Name: "acme", Max: 2}} {
			if _, err := s.SetLimit(ctx, l, "test"); err != nil {
				t.Fatal(err)
			}
		}
		reg, err := leaseworkotel.ObserveLimits(s, tel.options()...)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
		var es []lease.Event
		for _, p := range []string{"acme", "acme", "acme", "beta", "beta", "gamma"} {
			es = append(es, lease.Event{Kind: "k", Partition: p})
		}
		pgtest.Enqueue(t, s, es...)
		// acme's 2, beta's 1 and gamma's 1 are claimed; acme's third and
		// beta's second are set aside.
		if claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 4 {
			t.Fatalf("claim under the partition limits = %d claims, %v; want 4", len(claims), err)
		}

		m := tel.metrics(t)
		table := s.Schema() + ".events"
		byLimit := []attribute.Key{leaseworkotel.TableKey, leaseworkotel.LimitScopeKey, leaseworkotel.LimitNameKey}
		for name, want := range map[string]map[string]int64{
			"leasework.limits.up":       {table: 1},
			"leasework.limit.live":      {table + "/partition/acme": 2, table + "/partition/": 2},
			"leasework.limit.max":       {table + "/partition/acme": 2, table + "/partition/": 1},
			"leasework.limit.held_back": {table + "/partition/acme": 1, table + "/partition/": 1},
		} {
			keys := byLimit
			if name == "leasework.limits.up" {
				keys = byLimit[:1]
			}
			if got := points(t, m[name], keys...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v; want %v", name, got, want)
			}
		}
	})
}

// ObserveLimits observes the rate limits, scope "kind", "queue" or
// "partition": the starts each counts in the window that ends now, and its
// most, and, for a partition's, its events set aside (acme's second, and
// none under the default); without their tables, leasework.rate_limits.up
// is 0, the error goes to otel.Handle, and the concurrency limits are
// observed still.
func TestRateLimitMetrics(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv)
		for _, l := range []lease.RateLimit{
			{Scope: lease.ScopeKind, Name: "sms", Max: 2, Per: time.Hour}, {Scope: lease.ScopeQueue, Name: "bulk", Max: 100, Per: time.Minute},
			{Scope: lease.ScopePartition, Name: "acme", Max: 1, Per: time.Hour}, {Scope: lease.ScopePartition, Name: "", Max: 5, Per: time.Minute},
		} {
			if _, _, err := s.SetRateLimit(ctx, l, "test"); err != nil {
				t.Fatal(err)
			}
		}
		reg, err := leaseworkotel.ObserveLimits(s, tel.options()...)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
		pgtest.Enqueue(t, s, lease.Event{Kind: "sms"}, lease.Event{Kind: "sms"}, lease.Event{Kind: "sms"},
			lease.Event{Kind: "job", Partition: "acme"}, lease.Event{Kind: "job", Partition: "acme"})
		if claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
			t.Fatalf("claim under a rate limit of 2 and acme's of 1 = %d claims, %v; want 3", len(claims), err)
		}

		m := tel.metrics(t)
		table := s.Schema() + ".events"
		byLimit := []attribute.Key{leaseworkotel.TableKey, leaseworkotel.LimitScopeKey, leaseworkotel.LimitNameKey}
		for name, want := range map[string]map[string]int64{
			"leasework.rate_limits.up":       {table: 1},
			"leasework.rate_limit.recent":    {table + "/kind/sms": 2, table + "/queue/bulk": 0, table + "/partition/acme": 1, table + "/partition/": 0},
			"leasework.rate_limit.max":       {table + "/kind/sms": 2, table + "/queue/bulk": 100, table + "/partition/acme": 1, table + "/partition/": 5},
			"leasework.rate_limit.held_back": {table + "/partition/acme": 1, table + "/partition/": 0},
		} {
			keys := byLimit
			if name == "leasework.rate_limits.up" {
				keys = byLimit[:1]
			}
			if got := points(t, m[name], keys...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v; want %v", name, got, want)
			}
			if m[name].Description == "" || m[name].Unit == "" {
				t.Errorf("%s: unit %q, description %q; want both", name, m[name].Unit, m[name].Description)
			}
		}

		handled := &errorsHandled{}
		defer otel.SetErrorHandler(otel.GetErrorHandler())
		otel.SetErrorHandler(handled)
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "sms", Max: 5}, "test"); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"_rate_shares", "_rate_limits"} {
			if _, err := s.DB().ExecContext(ctx, `DROP TABLE `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+suffix)); err != nil {
				t.Fatal(err)
			}
		}
		m = tel.metrics(t)
		if got := points(t, m["leasework.rate_limits.up"], leaseworkotel.TableKey); got[table] != 0 || len(got) != 1 {
			t.Errorf("leasework.rate_limits.up without the rate limits' tables = %v; want 0", got)
		}
		if _, ok := m["leasework.rate_limit.recent"]; ok && len(points(t, m["leasework.rate_limit.recent"], byLimit...)) != 0 {
			t.Errorf("leasework.rate_limit.recent observed without the rate limits' tables")
		}
		if got := points(t, m["leasework.limit.max"], byLimit...); got[table+"/kind/sms"] != 5 {
			t.Errorf("leasework.limit.max without the rate limits' tables = %v; want kind sms's 5", got)
		}
		if errs := handled.all(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "read the rate limits") {
			t.Errorf("errors handled = %v; want the failed read of the rate limits", errs)
		}
	})
}
