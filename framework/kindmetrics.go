package framework

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyBuckets are the upper bounds, in seconds, of the latency
// histograms: from a few milliseconds (a wakeup by notification) to ten
// minutes.
var latencyBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// histogram counts observations by latencyBuckets, without a lock: every
// field is an atomic, so the attempts of many kinds and queues record at
// once. A rendering may see an observation in one field and not yet in
// another; each count it shows is one that was reached.
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	nanos  atomic.Int64                           // the sum, in nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	d = max(d, 0)
	i, _ := slices.BinarySearch(latencyBuckets[:], d.Seconds())
	h.counts[i].Add(1)
	h.nanos.Add(int64(d))
}

// kindQueue names one series: a kind in a queue.
type kindQueue struct{ kind, queue string }

// kindSeries is what the worker counts per kind and queue. An attempt
// looks its series up once, when it is claimed, and updates it without a
// lock.
type kindSeries struct {
	claimed   atomic.Uint64
	outcomes  [numOutcomes]atomic.Uint64 // of the outcomes counted per kind (outcomeInfo)
	wait, run histogram
}

// kindMetrics holds the series of every kind and queue the worker has
// claimed from: a map read without a lock once a series exists.
type kindMetrics struct {
	series sync.Map // kindQueue -> *kindSeries
}

// of returns the series of kind in queue, made on first use.
func (m *kindMetrics) of(kind, queue string) *kindSeries {
	k := kindQueue{kind, queue}
	if s, ok := m.series.Load(k); ok {
		return s.(*kindSeries)
	}
	s, _ := m.series.LoadOrStore(k, &kindSeries{})
	return s.(*kindSeries)
}

// write renders the series in the Prometheus text format, worker being
// the worker's label value.
func (m *kindMetrics) write(b *strings.Builder, worker string) {
	series := map[kindQueue]*kindSeries{}
	var keys []kindQueue
	m.series.Range(func(k, s any) bool {
		series[k.(kindQueue)] = s.(*kindSeries)
		keys = append(keys, k.(kindQueue))
		return true
	})
	slices.SortFunc(keys, func(a, b kindQueue) int {
		return strings.Compare(a.kind+"\x00"+a.queue, b.kind+"\x00"+b.queue)
	})
	labels := func(k kindQueue) string {
		return fmt.Sprintf(`worker="%s",kind="%s",queue="%s"`, worker, labelValue(k.kind), labelValue(k.queue))
	}
	b.WriteString("# HELP leasework_kind_claimed_total Claims taken, per kind and queue.\n# TYPE leasework_kind_claimed_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(b, "leasework_kind_claimed_total{%s} %d\n", labels(k), series[k].claimed.Load())
	}
	b.WriteString("# HELP leasework_kind_outcomes_total Outcomes written, per kind, queue and outcome.\n# TYPE leasework_kind_outcomes_total counter\n")
	for _, k := range keys {
		for _, o := range Outcomes() {
			if outcomeInfo[o].perKind {
				fmt.Fprintf(b, "leasework_kind_outcomes_total{%s,outcome=\"%s\"} %d\n", labels(k), o, series[k].outcomes[o].Load())
			}
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
			hist := h.of(series[k])
			var cum uint64
			for i, le := range latencyBuckets {
				cum += hist.counts[i].Load()
				fmt.Fprintf(b, "%s_bucket{%s,le=\"%s\"} %d\n", h.name, labels(k), formatBound(le), cum)
			}
			cum += hist.counts[len(latencyBuckets)].Load()
			fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", h.name, labels(k), cum)
			sum := time.Duration(hist.nanos.Load()).Seconds()
			fmt.Fprintf(b, "%s_sum{%s} %g\n%s_count{%s} %d\n", h.name, labels(k), sum, h.name, labels(k), cum)
		}
	}
}

func formatBound(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%g", f)
}
