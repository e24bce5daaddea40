package framework_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
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
			var drv leasework.Driver = pgtest.Drivers[0].New()
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
				pgtest.Enqueue(b, s, lease.Event{Kind: "k"})
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

// BenchmarkThroughput runs b.N enqueued no-op events through one worker,
// through each shipped driver, and reports jobs/s: claims, completions and
// renewals are one statement per batch. "zero-config" is a worker with
// every Config field at its zero value: 1000 slots, DONE rows kept for the
// dedupe window. "delete-at-completion" (Config.DeleteAtCompletion)
// deletes rows in the completion's statement. "keep-keys=1000" spreads the
// events over 1,000 keys, each key's events handled in order: every
// completion promotes the key's next event. "keep-keys=10" spreads them
// over 10 hot keys: at most 10 events can run at once, each waiting for
// the one before it to be written DONE. "slots=100" is the zero
// configuration with 100 slots. "limits" declares a kind limit and a
// queue limit of 10,000 that never bind. "partitions" spreads the events
// over 100 partitions, under no limit; "partition-limits" declares a
// default limit of 10,000 per partition over them, which never binds.
// jobs/claim is the mean claim batch;
// client-cpu-µs/job the benchmark process's CPU time per event, the
// runtime's and the driver's overhead.
func BenchmarkThroughput(b *testing.B) {
	for _, d := range pgtest.Drivers {
		for _, mode := range []string{"zero-config", "delete-at-completion", "keep-keys=1000", "keep-keys=10", "slots=100", "limits", "partitions", "partition-limits"} {
			b.Run(d.Name+"/"+mode, func(b *testing.B) {
				s := pgtest.Store(b, d.New(), lease.Options{})
				for i := 0; i < b.N; i += 1000 {
					events := make([]lease.Event, min(1000, b.N-i))
					for j := range events {
						events[j] = lease.Event{Kind: "k"}
						switch mode {
						case "keep-keys=1000":
							events[j].Key = fmt.Sprintf("key-%d", j)
						case "keep-keys=10":
							events[j].Key = fmt.Sprintf("key-%d", j%10)
						case "partitions", "partition-limits":
							events[j].Partition = fmt.Sprintf("p-%d", j%100)
						}
					}
					pgtest.Enqueue(b, s, events...)
				}
				if mode == "partition-limits" {
					if _, err := s.SetLimit(context.Background(), lease.Limit{Scope: lease.ScopePartition, Max: lease.MaxLimit}, "bench"); err != nil {
						b.Fatal(err)
					}
				}
				if mode == "limits" {
					for _, l := range []lease.Limit{{Scope: lease.ScopeKind, Name: "k", Max: lease.MaxLimit},
						{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: lease.MaxLimit}} {
						if _, err := s.SetLimit(context.Background(), l, "bench"); err != nil {
							b.Fatal(err)
						}
					}
				}
				cfg := framework.Config{Schema: s.Schema(), Table: s.Table(), Logger: discard}
				switch mode {
				case "delete-at-completion":
					cfg.DeleteAtCompletion = true
				case "slots=100":
					cfg.Concurrency = 100
				}
				w, err := framework.New(s.DB(), s.Driver(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				register(b, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
				b.ResetTimer()
				begin, cpu := time.Now(), processCPU(b)
				stop := start(b, w)
				for w.Counters().Completed < int64(b.N) {
					time.Sleep(time.Millisecond)
				}
				elapsed, cpu := time.Since(begin), processCPU(b)-cpu
				b.StopTimer()
				stop()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
				b.ReportMetric(float64(b.N)/float64(w.Counters().ClaimQueries), "jobs/claim")
				b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(b.N), "client-cpu-µs/job")
			})
		}
	}
}

// processCPU is the CPU time this process has used, user and system: the
// runtime's cost per job, which wall-clock rates hide on a machine the
// server shares.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkThroughputReference is the reference for BenchmarkThroughput,
// measured in the same run: b.N events through the lease store alone, with
// no runtime around it. Each of "loops" goroutines claims 100 rows and
// completes them, one statement each, as fast as it can. Compare jobs/s
// with BenchmarkThroughput/pgx/zero-config as a ratio.
func BenchmarkThroughputReference(b *testing.B) {
	for _, loops := range []int{1, 2} {
		b.Run(fmt.Sprintf("loops=%d", loops), func(b *testing.B) {
			s := pgtest.Store(b, pgtest.Drivers[0].New(), lease.Options{})
			for i := 0; i < b.N; i += 1000 {
				events := make([]lease.Event, min(1000, b.N-i))
				for j := range events {
					events[j] = lease.Event{Kind: "k"}
				}
				pgtest.Enqueue(b, s, events...)
			}
			ctx := context.Background()
			b.ResetTimer()
			begin := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, loops)
			for range loops {
				wg.Go(func() {
					for {
						claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
						if err != nil || len(claims) == 0 {
							errs <- err
							return
						}
						writes := make([]lease.Write, len(claims))
						for i, c := range claims {
							writes[i] = lease.Complete(c.Ref())
						}
						if _, err := s.WriteMany(ctx, writes...); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(begin)
			b.StopTimer()
			close(errs)
			for err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}

// BenchmarkRecoveryAfterCrash measures how long after a crashed owner's
// leases run out an idle worker, at the default poll interval, has taken
// over and completed its claims. Each iteration: 200 rows claimed by a
// "crashed" owner that never renews them, with a 2s lease; a worker started
// meanwhile. after-expiry-ms is the mean time from the moment the leases
// ran out (at the latest) until every row is DONE.
func BenchmarkRecoveryAfterCrash(b *testing.B) {
	const (
		rows     = 200
		leaseFor = 2 * time.Second
	)
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		s := pgtest.Store(b, pgtest.Drivers[0].New(), lease.Options{})
		pgtest.EnqueueN(b, s, rows, "k")
		w, err := framework.New(s.DB(), s.Driver(), framework.Config{
			Schema: s.Schema(), Table: s.Table(), Concurrency: rows, Logger: discard, Retention: -1,
		})
		if err != nil {
			b.Fatal(err)
		}
		register(b, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: rows, Lease: leaseFor, Worker: "crashed"})
		expired := time.Now().Add(leaseFor) // the leases run out by then at the latest
		if err != nil || len(claims) != rows {
			b.Fatalf("crashed owner's claim: %d rows, %v", len(claims), err)
		}
		stop := start(b, w)
		for w.Counters().Completed < rows {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(expired)
		stop()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "after-expiry-ms")
}
