package leaseworkotel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// seconds returns a float64 gauge's value per series: the values of
// keys, joined with "/".
func seconds(t *testing.T, m metricdata.Metrics, keys ...attribute.Key) map[string]float64 {
	t.Helper()
	data, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("%s: data of type %T; want a float64 gauge", m.Name, m.Data)
	}
	out := map[string]float64{}
	for _, p := range data.DataPoints {
		var name []string
		for _, k := range keys {
			v, _ := p.Attributes.Value(k)
			name = append(name, v.String())
		}
		out[strings.Join(name, "/")] = p.Value
	}
	return out
}

// ObserveLimits observes fair scheduling: each fair queue's partitions
// served now (a claim brings two in), each weight by queue and partition
// ("" for the default; a queue with a partition's weight alone is not
// fair and has no partitions served), each queue's priority aging in
// seconds; without fair scheduling's tables, leasework.fair.up is 0, the
// error goes to otel.Handle, and the limits are observed still.
func TestFairMetrics(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		tel := newTelemetry(t)
		s := newStore(t, drv)
		for _, w := range []lease.Weight{{Queue: "bulk", Weight: 1}, {Queue: "bulk", Partition: "acme", Weight: 3}, {Queue: "other", Partition: "p", Weight: 2}} {
			if _, err := s.SetWeight(ctx, w, "test"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SetAging(ctx, "bulk", 10*time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetAging(ctx, "fast", 1500*time.Millisecond, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 5}, "test"); err != nil {
			t.Fatal(err)
		}
		reg, err := leaseworkotel.ObserveLimits(s, tel.options()...)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", Queue: "bulk", Partition: "acme"}, lease.Event{Kind: "k", Queue: "bulk", Partition: "acme"},
			lease.Event{Kind: "k", Queue: "bulk", Partition: "beta"})
		if claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "bulk"}); err != nil || len(claims) != 1 {
			t.Fatalf("claim of queue bulk = %d claims, %v; want 1", len(claims), err)
		}

		m := tel.metrics(t)
		table := s.Schema() + ".events"
		for name, c := range map[string]struct {
			keys []attribute.Key
			want map[string]int64
		}{
			"leasework.fair.up":                {[]attribute.Key{leaseworkotel.TableKey}, map[string]int64{table: 1}},
			"leasework.fair.partitions_active": {[]attribute.Key{leaseworkotel.TableKey, leaseworkotel.QueueKey}, map[string]int64{table + "/bulk": 2}},
			"leasework.fair.weight": {[]attribute.Key{leaseworkotel.TableKey, leaseworkotel.QueueKey, leaseworkotel.PartitionKey},
				map[string]int64{table + "/bulk/": 1, table + "/bulk/acme": 3, table + "/other/p": 2}},
		} {
			if got := points(t, m[name], c.keys...); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("%s = %v; want %v", name, got, c.want)
			}
			if m[name].Description == "" || m[name].Unit == "" {
				t.Errorf("%s: unit %q, description %q; want both", name, m[name].Unit, m[name].Description)
			}
		}
		want := map[string]float64{table + "/bulk": 600, table + "/fast": 1.5}
		if got := seconds(t, m["leasework.priority_aging"], leaseworkotel.TableKey, leaseworkotel.QueueKey); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("leasework.priority_aging = %v; want %v", got, want)
		}
		if u := m["leasework.priority_aging"].Unit; u != "s" {
			t.Errorf("leasework.priority_aging: unit %q; want s", u)
		}

		handled := &errorsHandled{}
		defer otel.SetErrorHandler(otel.GetErrorHandler())
		otel.SetErrorHandler(handled)
		for _, suffix := range []string{"_queue_aging", "_fair_arrivals", "_fair_keys", "_fair_weights"} {
			if _, err := s.DB().ExecContext(ctx, `DROP TABLE `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+suffix)); err != nil {
				t.Fatal(err)
			}
		}
		m = tel.metrics(t)
		if got := points(t, m["leasework.fair.up"], leaseworkotel.TableKey); got[table] != 0 || len(got) != 1 {
			t.Errorf("leasework.fair.up without fair scheduling's tables = %v; want 0", got)
		}
		if _, ok := m["leasework.fair.weight"]; ok && len(points(t, m["leasework.fair.weight"], leaseworkotel.QueueKey)) != 0 {
			t.Errorf("leasework.fair.weight observed without fair scheduling's tables")
		}
		byLimit := []attribute.Key{leaseworkotel.TableKey, leaseworkotel.LimitScopeKey, leaseworkotel.LimitNameKey}
		if got := points(t, m["leasework.limit.max"], byLimit...); got[table+"/kind/k"] != 5 {
			t.Errorf("leasework.limit.max without fair scheduling's tables = %v; want kind k's 5", got)
		}
		if errs := handled.all(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "read the weights and priority agings") {
			t.Errorf("errors handled = %v; want the failed read of the weights", errs)
		}
	})
}
