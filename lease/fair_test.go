package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// setWeight sets w on s or fails the test.
func setWeight(t *testing.T, s *lease.Store, w lease.Weight) {
	t.Helper()
	if _, err := s.SetWeight(context.Background(), w, "test"); err != nil {
		t.Fatal(err)
	}
}

// enqueueMany enqueues n events of partition p in queue q, in batches.
func enqueueMany(t *testing.T, s *lease.Store, p, q string, n int) {
	t.Helper()
	for lo := 0; lo < n; lo += 500 {
		var es []lease.Event
		for i := lo; i < min(lo+500, n); i++ {
			es = append(es, lease.Event{Kind: "k", EventID: fmt.Sprintf("%s-%d", p, i), Partition: p, Queue: q})
		}
		pgtest.Enqueue(t, s, es...)
	}
}

// claimedOf claims rounds times up to limit rows of queue q, completing
// nothing, and counts the rows claimed per partition.
func claimedOf(t *testing.T, s *lease.Store, q string, rounds, limit int) (map[string]int, []leasework.Claim) {
	t.Helper()
	var all []leasework.Claim
	for range rounds {
		got, _ := claimAll(t, s, lease.ClaimRequest{Limit: limit, Queue: q})
		all = append(all, got...)
	}
	return partitionsOf(t, s, all), all
}

// Two partitions with full backlogs at weights 3:1 share the rows
// claimed 3:1, within 10%, whatever the size of the claims: 300 rows in
// claims of 1 and of 7, 1,000 in claims of 100.
func TestFairSplitsByWeight(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, c := range []struct{ limit, rows int }{{1, 300}, {7, 300}, {100, 1000}} {
			t.Run(fmt.Sprintf("limit %d", c.limit), func(t *testing.T) {
				s := pgtest.Store(t, drv, lease.Options{})
				setWeight(t, s, lease.Weight{Weight: 1})
				setWeight(t, s, lease.Weight{Partition: "big", Weight: 3})
				enqueueMany(t, s, "big", "", 1200)
				enqueueMany(t, s, "small", "", 1200)
				want := c.rows / c.limit * c.limit
				got, all := claimedOf(t, s, "", c.rows/c.limit, c.limit)
				if len(all) != want {
					t.Fatalf("claimed %d rows; want %d", len(all), want)
				}
				ratio := float64(got["big"]) / float64(got["small"])
				if ratio < 2.7 || ratio > 3.3 {
					t.Errorf("claimed %v: big/small = %.2f; want 3 ± 10%%", got, ratio)
				}
			})
		}
	})
}

// A partition with 10 events that comes while another has a backlog of
// thousands, at equal weights, has all 10 claimed within the next 20
// rows or so: it joins level with the busy one, not behind its backlog.
// And a partition with nothing due takes no share: the busy one gets
// whole claims meanwhile.
func TestFairNewPartitionNotBehindBacklog(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setWeight(t, s, lease.Weight{Weight: 1})
		enqueueMany(t, s, "big", "", 3000)
		got, _ := claimedOf(t, s, "", 5, 10)
		if got["big"] != 50 {
			t.Fatalf("with one partition due, 5 claims of 10 took %v; want all 50 of big", got)
		}
		enqueueMany(t, s, "late", "", 10)
		lateWithin24(t, s)
	})
}

// A partition whose rows all went (claimed) leaves fair scheduling, and
// comes back, level with the others, when a row of it is READY again: a
// retry, here.
func TestFairRetryBringsPartitionBack(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setWeight(t, s, lease.Weight{Weight: 1})
		enqueueMany(t, s, "one", "", 1)
		enqueueMany(t, s, "big", "", 2000)
		first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2})
		var one leasework.Claim
		for _, c := range first {
			if partitionsOf(t, s, []leasework.Claim{c})["one"] == 1 {
				one = c
			}
		}
		if one.ID == 0 {
			t.Fatalf("the first claim of 2 took %v; want one's row among them", partitionsOf(t, s, first))
		}
		// Claims that find one with nothing due take it out.
		claimedOf(t, s, "", 3, 10)
		write(t, s, lease.Retry(one.Ref(), time.Millisecond, "again"))
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, one.ID); err != nil {
			t.Fatal(err)
		}
		got, _ := claimedOf(t, s, "", 2, 2)
		if got["one"] != 1 {
			t.Errorf("after one's retry came due, 2 claims of 2 took %v; want one's row among them", got)
		}
	})
}

// Priority aging: a due row of level 1 that waited longer than the
// queue's threshold is taken with the rows of level 0, in its order
// among them; without aging, level 0 goes first.
func TestAgingMovesRowsUpOneLevel(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		var es []lease.Event
		for i := range 5 {
			es = append(es, lease.Event{Kind: "k", EventID: fmt.Sprintf("low-%d", i), Priority: 1})
			es = append(es, lease.Event{Kind: "k", EventID: fmt.Sprintf("high-%d", i)})
		}
		pgtest.Enqueue(t, s, es...)
		// The rows of level 1 have been due for an hour: a fixture.
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET next_attempt_at = now() - interval '1 hour' WHERE priority = 1`); err != nil {
			t.Fatal(err)
		}
		levels := func() []int {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			cs, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 5, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var out []int
			for _, c := range cs {
				out = append(out, c.Priority)
			}
			return out
		}
		if got := levels(); fmt.Sprint(got) != "[0 0 0 0 0]" {
			t.Errorf("without aging, a claim of 5 took levels %v; want level 0 first", got)
		}
		if _, err := s.SetAging(ctx, "", time.Minute, "test"); err != nil {
			t.Fatal(err)
		}
		if got := levels(); fmt.Sprint(got) != "[1 1 1 1 1]" {
			t.Errorf("with aging after a minute, a claim of 5 took levels %v; want the rows of level 1 due an hour, first as level 0", got)
		}
		if _, err := s.SetAging(ctx, "", 2*time.Hour, "test"); err != nil {
			t.Fatal(err)
		}
		if got := levels(); fmt.Sprint(got) != "[0 0 0 0 0]" {
			t.Errorf("with aging after 2 hours, a claim of 5 took levels %v; want level 0 first", got)
		}
	})
}

// No claim of a fair queue waits for another: a claim whose transaction
// stays open holds its partitions' passes, and a claim of the same
// partition meanwhile takes its rows and leaves its pass as a debt, which
// the next claim that can lock the partition pays.
func TestFairClaimsWaitForNoOtherClaim(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setWeight(t, s, lease.Weight{Weight: 1})
		enqueueMany(t, s, "a", "", 100)
		claimedOf(t, s, "", 1, 5) // a known to fair scheduling, with a pass
		debts := func() (n int, sum float64) {
			t.Helper()
			if err := s.DB().QueryRowContext(ctx, `SELECT count(*), COALESCE(sum(pass), 0) FROM `+
				lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_fair_debts")).Scan(&n, &sum); err != nil {
				t.Fatal(err)
			}
			return n, sum
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		held, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 5, Lease: time.Minute})
		if err != nil || len(held) != 5 {
			t.Fatalf("claim in an open transaction: %d rows, %v; want 5", len(held), err)
		}
		// A generous liveness bound: the claim waits for nothing.
		bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := s.Claim(bounded, lease.ClaimRequest{Limit: 5, Lease: time.Minute})
		if err != nil || len(got) != 5 {
			t.Fatalf("claim beside the open transaction: %d rows, %v; want 5 at once", len(got), err)
		}
		if n, sum := debts(); n != 1 || sum != 5 {
			t.Errorf("debts after the claim beside the open transaction: %d rows owing %v; want 1 owing 5 (5 rows of weight 1)", n, sum)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		claimedOf(t, s, "", 1, 5)
		if n, _ := debts(); n != 0 {
			t.Errorf("debts after a claim that could lock the partition: %d rows; want them paid", n)
		}
	})
}

// Order per key composes with fair scheduling: the keyed events of a fair
// queue's partitions run one at a time per key, in the order enqueued;
// and a claim that its queue's concurrency limit leaves no room takes
// nothing and leaves the partitions known.
func TestFairKeepsKeyOrderAndLimits(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setWeight(t, s, lease.Weight{Weight: 1})
		var es []lease.Event
		for i := range 5 {
			for _, p := range []string{"a", "b"} {
				es = append(es, lease.Event{Kind: "k", Key: "key-" + p, Partition: p, EventID: fmt.Sprintf("%s-%d", p, i)})
			}
		}
		pgtest.Enqueue(t, s, es...)
		var order []string
		for range 20 {
			got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
			if len(got) > 2 {
				t.Fatalf("a claim took %d keyed rows of 2 keys; want at most one a key", len(got))
			}
			for _, c := range got {
				order = append(order, c.EventID)
				write(t, s, lease.Complete(c.Ref()))
			}
			if len(order) == 10 {
				break
			}
		}
		perKey := map[string][]string{}
		for _, id := range order {
			perKey[id[:1]] = append(perKey[id[:1]], id)
		}
		for _, p := range []string{"a", "b"} {
			if got, want := fmt.Sprint(perKey[p]), fmt.Sprintf("[%s-0 %s-1 %s-2 %s-3 %s-4]", p, p, p, p, p); got != want {
				t.Errorf("key-%s ran %s; want %s", p, got, want)
			}
		}

		enqueueMany(t, s, "c", "", 10)
		setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 2})
		first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(first) != 2 {
			t.Fatalf("under a queue limit of 2: claimed %d; want 2", len(first))
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("with the queue's limit full: claimed %d; want none", len(got))
		}
		ws, err := s.Weights(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 || ws[0].Active != 1 {
			t.Errorf("weights after a claim with no room: %+v; want the default, with c still active", ws)
		}
	})
}

// A fair claim takes as many rows as there are, up to its Limit: when the
// partition furthest behind has fewer rows than its share, the rest come
// from the next partitions, whatever the claim's floors (a worker's
// claims read the queue's order from floors: a fair claim that came back
// short left the worker idle until its next wake).
func TestFairClaimTakesWhatThereIs(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setWeight(t, s, lease.Weight{Weight: 1})
		enqueueMany(t, s, "big", "", 200)
		claimedOf(t, s, "", 1, 5)
		// big owes 10 to its pass: a claim beside an open one.
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		claimedOf(t, s, "", 1, 10)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// One row of a partition that comes, at the queue's lowest pass,
		// well behind big's; the claim's floor past every row of big.
		enqueueMany(t, s, "small", "", 1)
		floor := time.Now().Add(time.Hour)
		got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 5, DueFrom: []time.Time{floor}})
		if n := partitionsOf(t, s, got); len(got) != 5 || n["small"] != 1 {
			t.Errorf("a claim of 5 took %v; want small's one row and 4 of big's", n)
		}
	})
}

// Every enqueue path brings a fair queue's partitions to its claims: the
// statement of one event, the batch statement (both as they fail on
// duplicates and as they skip them), and COPY, through each driver. A
// partition whose 10 events come while another has a backlog is claimed
// within the next 24 rows, whichever way its events went in, one call an
// event or all in one call; and each statement that inserts rows of a
// partition writes one arrival for it, however many rows it inserts, so a
// bulk enqueue gives a fair queue's claims no more arrivals to read.
func TestFairEveryEnqueuePathBringsItsPartition(t *testing.T) {
	pgtest.EachEnqueuePath(t, func(t *testing.T, p pgtest.EnqueuePath) {
		for _, c := range []struct {
			name    string
			perCall int
			skip    bool
		}{
			{"one a call", 1, false},
			{"one a call, skipping duplicates", 1, true},
			{"ten in one call", 10, false},
			{"ten in one call, skipping duplicates", 10, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
				ctx := context.Background()
				arrivals := func(partition string) int {
					t.Helper()
					var n int
					if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+lease.QuoteIdent(s.Schema())+"."+
						lease.QuoteIdent(s.Table()+"_fair_arrivals")+` WHERE partition = $1`, partition).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				enqueue := func(partition string, from, n int) {
					t.Helper()
					tx, err := s.DB().BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					var es []lease.Event
					for i := from; i < from+n; i++ {
						es = append(es, lease.Event{Kind: "k", EventID: fmt.Sprintf("%s-%d", partition, i), Partition: partition})
					}
					if _, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: c.skip}, es...); err != nil {
						t.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				}
				setWeight(t, s, lease.Weight{Weight: 1})
				inserts := pgtest.WatchInserts(t, s)
				enqueue("big", 0, 400)
				if n := arrivals("big"); n != 1 {
					t.Errorf("400 events of big in one call: %d arrivals; want 1", n)
				}
				got, _ := claimedOf(t, s, "", 5, 10)
				if got["big"] != 50 {
					t.Fatalf("with one partition due, 5 claims of 10 took %v; want all 50 of big", got)
				}

				copiesBefore, _ := inserts()
				for i := 0; i < 10; i += c.perCall {
					enqueue("late", i, c.perCall)
				}
				if copies, _ := inserts(); p.Copies != (copies > copiesBefore) {
					t.Fatalf("late's events went in by %d COPY statements; want COPY %v on path %s", copies-copiesBefore, p.Copies, p.Name)
				}
				if n, want := arrivals("late"), 10/c.perCall; n != want {
					t.Errorf("late's 10 events, %d a call: %d arrivals; want %d, one a statement", c.perCall, n, want)
				}
				lateWithin24(t, s)
			})
		}
	})
}

// lateWithin24 claims 4 rows at a time, 10 claims at most, until it has
// taken late's 10 events, and fails the test unless it took them all
// within 24 rows: a fair queue does not keep a partition that just came
// behind the backlog of another.
func lateWithin24(t *testing.T, s *lease.Store) {
	t.Helper()
	rows, seen := 0, 0
	for range 10 {
		got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 4})
		rows += len(got)
		seen += partitionsOf(t, s, got)["late"]
		if seen == 10 {
			break
		}
	}
	if seen != 10 || rows > 24 {
		t.Errorf("late's 10 events: %d claimed within %d rows; want all 10 within 24", seen, rows)
	}
}
