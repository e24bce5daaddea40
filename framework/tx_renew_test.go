package framework_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An open handler transaction holds up no renewal. One Transactional
// handler keeps its transaction open for 60% of its lease, with its
// completion made first (the worst case: the row stays locked all along)
// or last, while four other claims of the same worker wait for it to
// finish. The other claims are renewed all along, at their usual pace, and
// no lease is lost. The figures (renewals of each other claim while the
// transaction is open, and the longest gap between two of them) are
// logged; without the renewal's SKIP LOCKED, the early case renews nothing
// until the transaction commits.
func TestOpenTransactionHoldsUpNoRenewal(t *testing.T) {
	const (
		leaseFor   = 3 * time.Second
		renewEvery = 200 * time.Millisecond
		hold       = leaseFor * 6 / 10
		others     = 4
	)
	for _, early := range []bool{true, false} {
		t.Run(fmt.Sprintf("early=%v", early), func(t *testing.T) {
			s := newStore(t, pgtest.Drivers[0].New())
			table := effectsTable(t, s)
			var events []lease.Event
			for i := range others {
				events = append(events, lease.Event{Kind: "other", EventID: fmt.Sprint("other-", i)})
			}
			events = append(events, lease.Event{Kind: "hold", EventID: "hold"})
			ids := pgtest.Enqueue(t, s, events...)
			w := newWorker(t, s, framework.Config{
				Concurrency: others + 1, Lease: leaseFor, RenewEvery: renewEvery, PollInterval: 20 * time.Millisecond,
			})
			started, release := make(chan struct{}, others), make(chan struct{})
			opened, closing := make(chan struct{}), make(chan struct{})
			register(t, w, "other", framework.RetryPolicy{}, func(ctx context.Context, _ *leasework.Claim) error {
				started <- struct{}{}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			registerTx(t, w, "hold", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
				for range others {
					select {
					case <-started:
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				}
				if early {
					if err := framework.CompleteInTx(ctx, tx); err != nil {
						return err
					}
				}
				if err := insertEffect(ctx, tx, table, c); err != nil {
					return err
				}
				close(opened)
				defer close(closing)
				// The workload: a transaction kept open for most of the lease.
				select {
				case <-time.After(hold):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			start(t, w)

			// Sample the rows' leases while the transaction is open.
			recv(t, opened, "the handler's transaction to open")
			opening := time.Now()
			leases := map[int64][]time.Time{} // distinct lease_until per row, in order
			seenAt := map[int64][]time.Time{} // when each was first seen
			for sampling := true; sampling; {
				select {
				case <-closing:
					sampling = false
				case <-time.After(25 * time.Millisecond):
				}
				for _, e := range ids {
					r, err := s.Get(context.Background(), e.ID)
					if err != nil {
						t.Fatal(err)
					}
					if r.LeaseUntil == nil {
						continue
					}
					if l := leases[e.ID]; len(l) == 0 || !l[len(l)-1].Equal(*r.LeaseUntil) {
						leases[e.ID] = append(l, *r.LeaseUntil)
						seenAt[e.ID] = append(seenAt[e.ID], time.Now())
					}
				}
			}
			open := time.Since(opening)
			close(release)
			waitFor(t, "every event to complete", func() bool { return w.Counters().Completed == others+1 })

			var renewals []int
			var maxGap time.Duration
			for _, e := range ids[:others] {
				renewals = append(renewals, len(leases[e.ID])-1) // the first value was set before the window
				seen := seenAt[e.ID]
				for i := 1; i < len(seen); i++ {
					maxGap = max(maxGap, seen[i].Sub(seen[i-1]))
				}
			}
			own := len(leases[ids[others].ID]) - 1
			t.Logf("transaction open %v (lease %v, RenewEvery %v, completion %s): renewals of each other claim %v, longest gap between two %v (sampled every 25ms); renewals of the handler's own claim %d",
				open.Round(time.Millisecond), leaseFor, renewEvery, map[bool]string{true: "first", false: "last"}[early],
				renewals, maxGap.Round(time.Millisecond), own)
			if slices.Min(renewals) < 3 {
				t.Errorf("the other claims were renewed %v times while the transaction was open %v; want at least 3 each (one every %v)", renewals, open, renewEvery)
			}
			if c := w.Counters(); c.LeasesLost != 0 || c.StaleRejections != 0 || c.Completed != others+1 {
				t.Errorf("counters %+v; want no lease lost, every event completed", c)
			}
			if n := effectCounts(t, s, table)["hold"]; n != 1 {
				t.Errorf("%d effects of the held transaction; want 1", n)
			}
		})
	}
}
