package framework

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// latencyBuckets are the upper bounds, in seconds, of the latency
// histograms: from a few milliseconds (a wakeup by notification) to ten
// minutes.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// histogram counts observations by latencyBuckets. Its methods are called
// under kindMetrics.mu.
type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

func (h *histogram) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, len(latencyBuckets))
	}
	s := max(d.Seconds(), 0)
	if i, _ := slices.BinarySearch(latencyBuckets, s); i < len(latencyBuckets) {
		h.counts[i]++
	}
	h.sum += s
	h.n++
}

// kindQueue names one series: a kind in a queue.
type kindQueue struct{ kind, queue string }

// kindSeries is what the worker counts per kind and queue.
type kindSeries struct {
	claimed, completed, retried, snoozed, failed uint64
	wait, run                                    histogram
}

// kindMetrics holds the series of every kind and queue the worker has
// claimed from.
type kindMetrics struct {
	mu     sync.Mutex
	series map[kindQueue]*kindSeries
}

// update runs f on the series of kind in queue.
func (m *kindMetrics) update(kind, queue string, f func(*kindSeries)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series == nil {
		m.series = map[kindQueue]*kindSeries{}
	}
	k := kindQueue{kind, queue}
	s, ok := m.series[k]
	if !ok {
		s = &kindSeries{}
		m.series[k] = s
	}
	f(s)
}

// write renders the series in the Prometheus text format, worker being
// the worker's label value.
func (m *kindMetrics) write(b *strings.Builder, worker string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]kindQueue, 0, len(m.series))
	for k := range m.series {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b kindQueue) int {
		return strings.Compare(a.kind+"\x00"+a.queue, b.kind+"\x00"+b.queue)
	})
	labels := func(k kindQueue) string {
		return fmt.Sprintf(`worker="%s",kind="%s",queue="%s"`, worker, labelValue(k.kind), labelValue(k.queue))
	}
	b.WriteString("# HELP leasework_kind_claimed_total Claims taken, per kind and queue.\n# TYPE leasework_kind_claimed_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(b, "leasework_kind_claimed_total{%s} %d\n", labels(k), m.series[k].claimed)
	}
	b.WriteString("# HELP leasework_kind_outcomes_total Outcomes written, per kind, queue and outcome.\n# TYPE leasework_kind_outcomes_total counter\n")
	for _, k := range keys {
		s := m.series[k]
		for _, o := range []struct {
			name string
			n    uint64
		}{{"completed", s.completed}, {"retried", s.retried}, {"snoozed", s.snoozed}, {"failed", s.failed}} {
			fmt.Fprintf(b, "leasework_kind_outcomes_total{%s,outcome=\"%s\"} %d\n", labels(k), o.name, o.n)
		}
	}
	for _, h := range []struct {
		name, help string
		of         func(*kindSeries) *histogram
	}{
		{"leasework_queue_wait_seconds", "From an attempt's due time to its claim (database clock), per kind and queue; reclaims are not counted.",
			func(s *kindSeries) *histogram { return &s.wait }},
		{"leasework_run_seconds", "Handlers' run time, per kind and queue.",
			func(s *kindSeries) *histogram { return &s.run }},
	} {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.help, h.name)
		for _, k := range keys {
			hist := h.of(m.series[k])
			var cum uint64
			for i, le := range latencyBuckets {
				if hist.counts != nil {
					cum += hist.counts[i]
				}
				fmt.Fprintf(b, "%s_bucket{%s,le=\"%s\"} %d\n", h.name, labels(k), formatBound(le), cum)
			}
			fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", h.name, labels(k), hist.n)
			fmt.Fprintf(b, "%s_sum{%s} %g\n%s_count{%s} %d\n", h.name, labels(k), hist.sum, h.name, labels(k), hist.n)
		}
	}
}

func formatBound(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%g", f)
}
