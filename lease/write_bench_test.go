package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// BenchmarkGuardedWrites measures one batched guarded write of 100 claims,
// through each driver, with 1,000 other claims in flight in the table (the
// rows a plan that is not primary-key driven would read): complete (rows
// marked DONE), retry (rows back to READY) and renew. Each write's claims
// are taken with the timer stopped. ns/op is one statement of 100 rows;
// compare across commits with benchstat.
func BenchmarkGuardedWrites(b *testing.B) {
	const batch, inFlight = 100, 1000
	for _, d := range pgtest.Drivers {
		for _, op := range []string{"complete", "retry", "renew"} {
			b.Run(d.Name+"/"+op, func(b *testing.B) {
				s := pgtest.Store(b, d.New(), lease.Options{})
				ctx := context.Background()
				enqueue := func(n int) {
					events := make([]lease.Event, n)
					for i := range events {
						events[i] = lease.Event{Kind: "k", MaxAttempts: 1_000_000} // retried at will
					}
					pgtest.Enqueue(b, s, events...)
				}
				claim := func() []leasework.Ref {
					cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: batch, Lease: time.Hour})
					if err != nil || len(cs) != batch {
						b.Fatalf("claim: %d rows, %v", len(cs), err)
					}
					refs := make([]leasework.Ref, len(cs))
					for i, c := range cs {
						refs[i] = c.Ref()
					}
					return refs
				}
				// Claims in flight that the writes must not read.
				enqueue(inFlight)
				for range inFlight / batch {
					claim()
				}
				var writes []lease.Write
				switch op {
				case "retry": // the same rows, READY again after each retry
					enqueue(batch)
				case "renew": // the same claims, renewed again and again
					enqueue(batch)
					writes = writesFor(claim(), func(r leasework.Ref) lease.Write { return lease.Renew(r, time.Hour) })
				}
				for b.Loop() {
					switch op {
					case "complete":
						b.StopTimer()
						enqueue(batch)
						writes = writesFor(claim(), lease.Complete)
						b.StartTimer()
					case "retry":
						b.StopTimer()
						writes = writesFor(claim(), func(r leasework.Ref) lease.Write { return lease.Retry(r, 0, "boom") })
						b.StartTimer()
					}
					res, err := s.WriteMany(ctx, writes...)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range res {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
			})
		}
	}
}
