package lease_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// BenchmarkEnqueueUnique compares an enqueue of 100 events a transaction
// made unique by their arguments (lease.Unique: the id derived from the
// JSON payload) with the same events given event ids, and given none (a
// random UUID each), through pgx, each in a table of its own:
//
//	go test -run '^$' -bench EnqueueUnique -benchtime 200x ./lease/
func BenchmarkEnqueueUnique(b *testing.B) {
	for _, mode := range []string{"no id", "event id", "unique by args"} {
		b.Run(mode, func(b *testing.B) {
			s := pgtest.Store(b, drv, lease.Options{})
			ctx := context.Background()
			n := 0
			b.ResetTimer()
			for range b.N {
				events := make([]lease.Event, 100)
				for j := range events {
					n++
					events[j] = lease.Event{Kind: "k", Payload: []byte(fmt.Sprintf(`{"order":%d,"customer":"c-%d"}`, n, n%97))}
					switch mode {
					case "event id":
						events[j].EventID = fmt.Sprintf("order-%d", n)
					case "unique by args":
						events[j].Unique = &lease.Unique{ByArgs: true, ArgKeys: []string{"order"}}
					}
				}
				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Enqueue(ctx, tx, events...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
