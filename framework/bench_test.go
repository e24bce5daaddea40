package framework_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

var discard = slog.New(slog.DiscardHandler)

// BenchmarkPickupLatency measures how long an idle worker takes to start the
// handler of an event, from the start of the transaction that enqueues it:
// woken by LISTEN/NOTIFY, or finding it by polling alone. Both poll every
// 100ms, and events arrive at a random phase of the poll cycle. pickup-µs is
// the mean from the start of the enqueue, after-commit-µs from the moment its
// commit returned (the notification can even arrive first).
func BenchmarkPickupLatency(b *testing.B) {
	const interval = 100 * time.Millisecond
	for _, mode := range []string{"notify", "poll"} {
		b.Run(mode, func(b *testing.B) {
			var drv leasework.Driver = drivers[0].new()
			if mode == "poll" {
				drv = pollOnly{drv}
			}
			s := pgtest.Store(b, drv, lease.Options{})
			w := newWorker(b, s, framework.Config{PollInterval: interval, Logger: discard})
			picked := make(chan time.Time, 1)
			register(b, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
				picked <- time.Now()
				return nil
			})
			start(b, w)
			if mode == "notify" {
				recv(b, framework.Listening(w), "the worker to listen")
			}
			var total, afterCommit time.Duration
			b.ResetTimer()
			for range b.N {
				// Enqueue at a random phase of the poll cycle, as real
				// traffic would, not just after the last pickup.
				b.StopTimer()
				time.Sleep(rand.N(interval))
				b.StartTimer()
				begin := time.Now()
				enqueue(b, s, lease.Event{Kind: "k"})
				committed := time.Now()
				at := recv(b, picked, "the pickup")
				total += at.Sub(begin)
				afterCommit += at.Sub(committed)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "pickup-µs")
			b.ReportMetric(float64(afterCommit.Microseconds())/float64(b.N), "after-commit-µs")
		})
	}
}
