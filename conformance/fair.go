package conformance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// The properties of fair scheduling (lease.Weight): within a priority
// level, a fair queue's claims take its partitions' events in proportion
// to their weights, and the share of a partition with nothing due goes to
// the others.
func fairProperties() []property {
	return []property{
		{"FairClaimsSplitByWeightUnderConcurrentClaims", fairClaimsSplitByWeight},
		{"IdlePartitionsShareIsUsedAndItsReturnWaitsForNoBacklog", idlePartitionsShareIsUsed},
	}
}

// setWeight sets w through the store under test.
func (e *env) setWeight(w lease.Weight) {
	e.t.Helper()
	if _, err := e.store.SetWeight(e.ctx, w, e.t.Name()); err != nil {
		e.t.Fatalf("set weight %+v: %v", w, err)
	}
}

// fairEvents are n events of partition p, enqueued in batches of 500.
func (e *env) enqueueFair(p string, n int) {
	e.t.Helper()
	for lo := 0; lo < n; lo += 500 {
		var es []lease.Event
		for i := lo; i < min(lo+500, n); i++ {
			es = append(es, lease.Event{Kind: "k", Partition: p, EventID: fmt.Sprintf("%s/%05d", p, i)})
		}
		e.enqueue(es...)
	}
}

// FairClaimsSplitByWeightUnderConcurrentClaims: two partitions with full
// backlogs, of weights 3 and 1 (the queue's default), claimed by four
// claimers through the driver, in claims of 1 to 8 rows, each completed
// at once: of the first 1,000 rows claimed, the heavy partition has 3
// for 1 of the light one's, within 10%.
func fairClaimsSplitByWeight(e *env) {
	const total, claimers = 1000, 4
	e.setWeight(lease.Weight{Weight: 1})
	e.setWeight(lease.Weight{Partition: "heavy", Weight: 3})
	e.enqueueFair("heavy", 1500)
	e.enqueueFair("light", 1500)

	var mu sync.Mutex
	counts := map[string]int{}
	var claimed atomic.Int64
	run, stop := context.WithCancel(e.ctx)
	defer stop()
	errs := make(chan error, claimers)
	var wg sync.WaitGroup
	for w := range claimers {
		wg.Go(func() {
			for n := 0; claimed.Load() < total && run.Err() == nil; n++ {
				got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1 + (w+n)%8, Lease: testLease, Worker: fmt.Sprintf("claimer-%d", w)})
				if err != nil {
					errs <- fmt.Errorf("claimer %d: claim: %w", w, err)
					stop()
					return
				}
				mu.Lock()
				for _, c := range got {
					if claimed.Add(1) <= total {
						counts[partitionOf(c.EventID)]++
					}
				}
				mu.Unlock()
				refs := make([]lease.Write, 0, len(got))
				for _, c := range got {
					refs = append(refs, lease.Complete(c.Ref()))
				}
				if len(refs) > 0 {
					if _, err := e.store.WriteMany(e.ctx, refs...); err != nil {
						errs <- fmt.Errorf("claimer %d: complete: %w", w, err)
						stop()
						return
					}
				}
				if len(got) == 0 {
					errs <- fmt.Errorf("claimer %d: a claim found nothing with %d rows of 3,000 claimed", w, claimed.Load())
					stop()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	ratio := float64(counts["heavy"]) / float64(counts["light"])
	e.t.Logf("of the first %d rows claimed: %v (%.2f : 1)", total, counts, ratio)
	if ratio < 2.7 || ratio > 3.3 {
		e.t.Errorf("of the first %d rows claimed, heavy (weight 3) had %d and light (weight 1) %d: %.2f : 1; want 3 : 1 within 10%%",
			total, counts["heavy"], counts["light"], ratio)
	}
}

// IdlePartitionsShareIsUsedAndItsReturnWaitsForNoBacklog: at equal
// weights, while only one partition has events, it gets every row of
// every claim; a partition whose 10 events come while the other has a
// backlog of 3,000 has them all claimed within the next 30 rows, not
// behind the backlog.
func idlePartitionsShareIsUsed(e *env) {
	e.setWeight(lease.Weight{Weight: 1})
	e.enqueueFair("busy", 3000)
	claim := func(limit int) []leasework.Claim {
		e.t.Helper()
		got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: limit, Lease: testLease})
		if err != nil {
			e.t.Fatalf("claim: %v", err)
		}
		return got
	}
	for i := range 5 {
		got := claim(10)
		busy := 0
		for _, c := range got {
			if partitionOf(c.EventID) == "busy" {
				busy++
			}
		}
		if busy != 10 {
			e.t.Fatalf("claim %d of 10 with one partition due: %d rows of busy of %d; want 10", i+1, busy, len(got))
		}
	}
	e.enqueueFair("back", 10)
	rows, back := 0, 0
	for rows < 30 && back < 10 {
		for _, c := range claim(5) {
			rows++
			if partitionOf(c.EventID) == "back" {
				back++
			}
		}
	}
	if back < 10 {
		e.t.Errorf("back's 10 events, come beside a backlog of busy's: %d of them claimed within the next %d rows; want all 10 within 30", back, rows)
	}
}
