package lease_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// BenchmarkKeyedServerCPU measures what order per key costs the server:
// b.N events claimed and completed through the store alone, 500 a
// statement, keyless and spread over 1,000 keys (every completion passes
// its key on to the key's next event), and reports the CPU time the
// server spent per event, for the claims and for the completions apart.
// All statements go through one connection, whose backend's CPU time is
// read from /proc/<pid>/schedstat before and after each: the server must
// run on this machine (the throwaway one does). Time on the CPU is far
// less disturbed than a rate by the other work of a shared machine, so
// the modes compare as a ratio even where BenchmarkThroughput's rates
// vary twofold from one run to the next. The enqueue (and keyed rows'
// commit-time step) is not counted. "keys=1000/taking-turns" completes
// through [lease.Store.WriteManyTakingTurns], as a worker does: each
// completion claims the keys' next events, and the claim statement runs
// only for the heads. Run it with -benchtime 20000x.
func BenchmarkKeyedServerCPU(b *testing.B) {
	for _, mode := range []string{"keyless", "keys=1000", "keys=1000/taking-turns"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s := pgtest.Store(b, pgtest.Drivers[0].New(), lease.Options{})
			for i := 0; i < b.N; i += 1000 {
				events := make([]lease.Event, min(1000, b.N-i))
				for j := range events {
					events[j] = lease.Event{Kind: "k"}
					if mode != "keyless" {
						events[j].Key = fmt.Sprintf("key-%d", j)
					}
				}
				pgtest.Enqueue(b, s, events...)
			}
			db := s.DB()
			db.SetMaxOpenConns(1)
			var pid int
			if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				b.Fatal(err)
			}
			onCPU := func() time.Duration {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
				if err != nil {
					b.Fatalf("the server's backend is not on this machine: %v", err)
				}
				ns, err := strconv.ParseInt(strings.Fields(string(stat))[0], 10, 64)
				if err != nil {
					b.Fatalf("/proc/%d/schedstat: %v", pid, err)
				}
				return time.Duration(ns)
			}
			var claiming, completing time.Duration
			var taken []leasework.Claim // claimed by completions, to complete next
			b.ResetTimer()
			for done := 0; done < b.N; {
				t0 := onCPU()
				claims := taken[:min(500, len(taken))]
				taken = taken[len(claims):]
				if len(claims) == 0 {
					var err error
					claims, err = s.Claim(ctx, lease.ClaimRequest{Limit: 500, Lease: time.Minute})
					if err != nil || len(claims) == 0 {
						b.Fatalf("claim after %d of %d events: %d claims, %v", done, b.N, len(claims), err)
					}
				}
				t1 := onCPU()
				writes := make([]lease.Write, len(claims))
				for i, c := range claims {
					writes[i] = lease.Complete(c.Ref())
				}
				var res []lease.Result
				var err error
				if mode == "keys=1000/taking-turns" {
					var more []leasework.Claim
					res, more, err = s.WriteManyTakingTurns(ctx, lease.ClaimRequest{Limit: len(claims), Lease: time.Minute}, writes...)
					taken = append(taken, more...)
				} else {
					res, err = s.WriteMany(ctx, writes...)
				}
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatalf("complete: %v", r.Err)
					}
				}
				claiming += t1 - t0
				completing += onCPU() - t1
				done += len(claims)
			}
			b.StopTimer()
			perEvent := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(perEvent(claiming+completing), "server-cpu-µs/event")
			b.ReportMetric(perEvent(claiming), "claim-cpu-µs/event")
			b.ReportMetric(perEvent(completing), "complete-cpu-µs/event")
		})
	}
}
