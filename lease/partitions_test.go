package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// partitionLimit is the limit of partition p (empty: the default).
func partitionLimit(p string, max int) lease.Limit {
	return lease.Limit{Scope: lease.ScopePartition, Name: p, Max: max}
}

// enqueueIn enqueues n events of kind k in partition p, with event ids
// p-1 to p-n, in queue q (empty: the default).
func enqueueIn(t *testing.T, s *lease.Store, p, q string, n int) {
	t.Helper()
	var es []lease.Event
	for i := 1; i <= n; i++ {
		es = append(es, lease.Event{Kind: "k", EventID: fmt.Sprintf("%s-%d", p, i), Partition: p, Queue: q})
	}
	pgtest.Enqueue(t, s, es...)
}

// partitionsOf counts claims per partition, read from their event ids.
func partitionsOf(t *testing.T, s *lease.Store, claims []leasework.Claim) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, c := range claims {
		var p string
		if err := s.DB().QueryRow(`SELECT COALESCE(partition_key, '') FROM `+s.QualifiedTable()+` WHERE id = $1`, c.ID).Scan(&p); err != nil {
			t.Fatal(err)
		}
		n[p]++
	}
	return n
}

// statusesIn counts the rows of partition p per status.
func statusesIn(t *testing.T, s *lease.Store, p string) map[string]int {
	t.Helper()
	rows, err := s.DB().Query(`SELECT status, count(*) FROM `+s.QualifiedTable()+` WHERE partition_key = $1 GROUP BY status`, p)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var st string
		var c int
		if err := rows.Scan(&st, &c); err != nil {
			t.Fatal(err)
		}
		n[st] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// claimUntil claims (limit 100, queue q) rounds times and returns every
// claim: a claim may bring back rows set aside, which the next takes.
func claimUntil(t *testing.T, s *lease.Store, q string, rounds int) []leasework.Claim {
	t.Helper()
	var all []leasework.Claim
	for range rounds {
		got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100, Queue: q})
		all = append(all, got...)
	}
	return all
}

// wantPartitionsCounted checks each partition slot's count against the
// rows: the attempts it counts, less its releases not yet counted, are
// the INPROGRESS rows that name it. As wantCounted for the other limits.
func wantPartitionsCounted(t *testing.T, s *lease.Store, step string) {
	t.Helper()
	name := func(suffix string) string {
		return lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_"+suffix)
	}
	rows, err := s.DB().Query(`
		SELECT s.partition, s.used - (SELECT COALESCE(sum(r.n), 0) FROM ` + name("partition_releases") + ` AS r WHERE r.slot = s.id),
		    (SELECT count(*) FROM ` + s.QualifiedTable() + ` AS e WHERE e.status = 'INPROGRESS' AND e.partition_slot = s.id)
		FROM ` + name("partition_slots") + ` AS s ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var counted, held int64
		if err := rows.Scan(&p, &counted, &held); err != nil {
			t.Fatal(err)
		}
		if counted != held {
			t.Errorf("after %s: partition %q counts %d attempts; %d rows are counted in its slot", step, p, counted, held)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// A partition limit holds each partition to its own Max, or the default,
// while rows of no partition are claimed past them; the rows a full
// partition holds back are set aside (WAITING), and come back, one for
// each place given back.
func TestPartitionLimitHoldsEachPartition(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, partitionLimit("", 2))
		setLimit(t, s, partitionLimit("acme", 1))
		enqueueIn(t, s, "acme", "", 5)
		enqueueIn(t, s, "beta", "", 5)
		pgtest.EnqueueN(t, s, 3, "k")

		first, heldBack := claimAll(t, s, lease.ClaimRequest{Limit: 100})
		if got, want := partitionsOf(t, s, first), map[string]int{"acme": 1, "beta": 2, "": 3}; !equalCounts(got, want) {
			t.Fatalf("first claim took %v; want %v", got, want)
		}
		if !heldBack {
			t.Error("first claim: heldBack false; the partitions held rows back")
		}
		if got, want := statusesIn(t, s, "acme"), map[string]int{"INPROGRESS": 1, "WAITING": 4}; !equalCounts(got, want) {
			t.Errorf("acme's rows: %v; want %v (the rows held back set aside)", got, want)
		}
		if got, want := statusesIn(t, s, "beta"), map[string]int{"INPROGRESS": 2, "WAITING": 3}; !equalCounts(got, want) {
			t.Errorf("beta's rows: %v; want %v", got, want)
		}
		wantPartitionsCounted(t, s, "the first claim")
		if got := claimUntil(t, s, "", 3); len(got) != 0 {
			t.Fatalf("claims while the partitions are full took %d rows; want none", len(got))
		}

		byPartition := map[string][]leasework.Claim{}
		for _, c := range first {
			p := "none"
			for k := range partitionsOf(t, s, []leasework.Claim{c}) {
				if k != "" {
					p = k
				}
			}
			byPartition[p] = append(byPartition[p], c)
		}
		write(t, s, lease.Complete(byPartition["acme"][0].Ref()))
		write(t, s, lease.Complete(byPartition["beta"][0].Ref()))
		wantPartitionsCounted(t, s, "two completions")
		next := claimUntil(t, s, "", 3)
		if got, want := partitionsOf(t, s, next), map[string]int{"acme": 1, "beta": 1}; !equalCounts(got, want) {
			t.Fatalf("claims after a completion in each took %v; want %v", got, want)
		}
		wantPartitionsCounted(t, s, "the claims after them")

		limits, err := s.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]lease.LimitInfo{}
		for _, l := range limits {
			if l.Scope == lease.ScopePartition {
				seen[l.Name] = l
			}
		}
		if l := seen["acme"]; l.Max != 1 || l.Live != 1 || l.HeldBack != 3 {
			t.Errorf("Limits: acme %+v; want Max 1, Live 1, HeldBack 3", l)
		}
		if l := seen[""]; l.Max != 2 || l.Live != 2 || l.HeldBack != 2 {
			t.Errorf("Limits: the default %+v; want Max 2, Live 2 (beta's), HeldBack 2", l)
		}
	})
}

// equalCounts says whether two counts agree, a missing key counting 0.
func equalCounts(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// An attempt whose lease ran out stops holding its partition's place: a
// sweep of another queue gives it back, the row set aside behind it is
// claimed, and the late owner's completion is refused.
func TestPartitionPlaceFreesWhenItsLeaseRunsOut(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, partitionLimit("acme", 1))
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "held", Partition: "acme", Queue: "other"})
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "behind", Partition: "acme"})
		held := claimUntil(t, s, "other", 1)
		if len(held) != 1 {
			t.Fatalf("claim of queue other = %v; want held", held)
		}
		if got := claimUntil(t, s, "", 2); len(got) != 0 {
			t.Fatalf("claims while held's lease runs took %v; want nothing", got)
		}
		if err := leasetest.ExpireLease(ctx, s, held[0].ID); err != nil {
			t.Fatal(err)
		}
		got := claimUntil(t, s, "", 3)
		if len(got) != 1 || got[0].EventID != "behind" {
			t.Fatalf("claims after held's lease ran out = %v; want behind", got)
		}
		wantPartitionsCounted(t, s, "the sweep")
		if _, err := s.Write(ctx, lease.Complete(held[0].Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("held's late completion: %v; want ErrLeaseLost", err)
		}
		// held, taken back by its own queue, needs a place again: none.
		if again := claimUntil(t, s, "other", 2); len(again) != 0 {
			t.Errorf("claim of queue other while behind runs = %v; want nothing", again)
		}
		write(t, s, lease.Complete(got[0].Ref()))
		again := claimUntil(t, s, "other", 2)
		if len(again) != 1 || again[0].ID != held[0].ID || !again[0].Reclaimed {
			t.Fatalf("claim of queue other after behind ended = %v; want held taken back", again)
		}
		wantPartitionsCounted(t, s, "held taken back")
	})
}

// Every path that claims, ends, takes back or frees an attempt keeps the
// partition slots' counts equal to the rows they count.
func TestPartitionCountsFollowEveryPath(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, partitionLimit("", 3))
		enqueueIn(t, s, "p", "", 30)
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "last-try", Partition: "q", MaxAttempts: 1})
		claim := func(step string) []leasework.Claim {
			t.Helper()
			// Three claims: one that counts the places given back, one
			// that brings back the rows set aside, one that takes them.
			got := claimUntil(t, s, "", 3)
			wantPartitionsCounted(t, s, step)
			return got
		}
		c := claim("the first claims")
		if n := partitionsOf(t, s, c)["p"]; n != 3 {
			t.Fatalf("first claims took %d of p; want 3", n)
		}
		var ps []leasework.Claim
		for _, x := range c {
			if x.EventID == "last-try" {
				if err := leasetest.ExpireLease(ctx, s, x.ID); err != nil {
					t.Fatal(err)
				}
				continue
			}
			ps = append(ps, x)
		}
		write(t, s, lease.Complete(ps[0].Ref()))
		write(t, s, lease.Retry(ps[1].Ref(), 0, "again"))
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteTx(ctx, tx, lease.Complete(ps[2].Ref())); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wantPartitionsCounted(t, s, "a completion, a retry, a completion in the caller's transaction")

		c = claim("the claims counting the releases (and ending the exhausted holder)")
		if len(c) != 3 {
			t.Fatalf("claims after three ends took %d; want 3", len(c))
		}
		write(t, s, lease.Release(c[0].Ref()))
		if _, err := s.Cancel(ctx, c[1].ID, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(ctx, lease.Complete(c[1].Ref())); !errors.Is(err, leasework.ErrCancelled) {
			t.Fatalf("the cancelled attempt's completion: %v; want ErrCancelled", err)
		}
		if err := leasetest.ExpireLease(ctx, s, c[2].ID); err != nil {
			t.Fatal(err)
		}
		wantPartitionsCounted(t, s, "a release, a cancel and an expired lease")
		again := claim("claims taking back the expired lease")
		if !slices.ContainsFunc(again, func(x leasework.Claim) bool { return x.ID == c[2].ID && x.Reclaimed }) {
			t.Fatalf("claims after the lease ran out = %v; want row %d taken back", again, c[2].ID)
		}
		if len(again) != 3 {
			t.Fatalf("claims after the lease ran out took %d; want 3", len(again))
		}

		setLimit(t, s, partitionLimit("p", 1))
		wantPartitionsCounted(t, s, "a lowering")
		if got := claim("claims past a lowered limit"); len(got) != 0 {
			t.Fatalf("claims past a lowered limit took %d; want none", len(got))
		}
		for _, x := range again {
			write(t, s, lease.Complete(x.Ref()))
		}
		wantPartitionsCounted(t, s, "completions past a lowered limit")
		if got := claim("claims after a lowering"); len(got) != 1 {
			t.Fatalf("claims after a lowering took %d; want 1", len(got))
		}
		setLimit(t, s, partitionLimit("p", 5))
		if got := claim("claims after a raise"); len(got) != 4 {
			t.Fatalf("claims after a raise took %d; want 4 more", len(got))
		}
		if _, err := s.ClearLimit(ctx, lease.ScopePartition, "p", "test"); err != nil {
			t.Fatal(err)
		}
		wantPartitionsCounted(t, s, "clearing p's own limit (the default of 3 holds it)")
		if got := claim("claims under the default again"); len(got) != 0 {
			t.Fatalf("claims with 5 live under a default of 3 took %d; want none", len(got))
		}
		if _, err := s.ClearLimit(ctx, lease.ScopePartition, "", "test"); err != nil {
			t.Fatal(err)
		}
		rest := claim("claims under no limit")
		var aside int
		if err := s.DB().QueryRow(`SELECT count(*) FROM ` + s.QualifiedTable() + ` WHERE status = 'WAITING'`).Scan(&aside); err != nil {
			t.Fatal(err)
		}
		if aside != 0 || len(rest) == 0 {
			t.Fatalf("after every limit cleared: %d rows still set aside, %d claimed; want none set aside", aside, len(rest))
		}
	})
}

// Concurrent claimers and completers under a partition limit finish every
// event (no row set aside is left behind), never run more than the limit
// of a partition at once (sampled throughout), and leave the counts right.
func TestConcurrentClaimsKeepPartitionLimits(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		const most, parts, per = 2, 10, 20
		setLimit(t, s, partitionLimit("", most))
		for p := range parts {
			enqueueIn(t, s, fmt.Sprintf("t%d", p), "", per)
		}
		stop := make(chan struct{})
		var worst int
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				if err := s.DB().QueryRow(`SELECT COALESCE(max(c), 0) FROM (SELECT count(*) AS c FROM ` + s.QualifiedTable() + `
					WHERE status = 'INPROGRESS' AND lease_until > clock_timestamp() GROUP BY partition_key) AS x`).Scan(&n); err != nil {
					t.Error(err)
					return
				}
				worst = max(worst, n)
			}
		})
		var wg sync.WaitGroup
		deadline := time.Now().Add(2 * time.Minute)
		for w := range 4 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 5, Lease: time.Minute, Worker: fmt.Sprintf("w%d", w)})
					if err != nil {
						t.Error(err)
						return
					}
					for _, c := range got {
						if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
							t.Error(err)
							return
						}
					}
					var left int
					if err := s.DB().QueryRow(`SELECT count(*) FROM ` + s.QualifiedTable() + ` WHERE status <> 'DONE'`).Scan(&left); err != nil {
						t.Error(err)
						return
					}
					if left == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sampler.Wait()
		var done int
		if err := s.DB().QueryRow(`SELECT count(*) FROM ` + s.QualifiedTable() + ` WHERE status = 'DONE'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done != parts*per {
			t.Errorf("%d of %d events DONE within the 2-minute bound of the claim loops", done, parts*per)
		}
		if worst > most {
			t.Errorf("a partition had %d live attempts at once; its limit is %d", worst, most)
		}
		wantPartitionsCounted(t, s, "the concurrent claims")
	})
}

// SetLimit refuses a partition's name past MaxPartitionBytes, and an event
// whose Partition is invalid is refused before anything is sent.
func TestPartitionInputIsChecked(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	long := string(make([]byte, lease.MaxPartitionBytes+1))
	if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Name: long, Max: 1}, ""); err == nil {
		t.Error("SetLimit with a partition name past MaxPartitionBytes: no error")
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Partition: "bad\x00"}); err == nil {
		t.Error("Enqueue of a Partition with a NUL byte: no error")
	}
}

// A partition with room takes its rows set aside before its newer rows
// still READY: a partition that keeps getting new events does not pass
// over the ones it set aside.
func TestPartitionTakesRowsSetAsideFirst(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setLimit(t, s, partitionLimit("p", 1))
		enqueueIn(t, s, "p", "", 3)
		first := claimUntil(t, s, "", 1)
		if len(first) != 1 || first[0].EventID != "p-1" {
			t.Fatalf("first claim = %v; want p-1", first)
		}
		if got := statusesIn(t, s, "p"); got["WAITING"] != 2 {
			t.Fatalf("p's rows after the first claim: %v; want p-2 and p-3 set aside", got)
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "p-4", Partition: "p"})
		write(t, s, lease.Complete(first[0].Ref()))
		for _, want := range []string{"p-2", "p-3", "p-4"} {
			got := claimUntil(t, s, "", 1)
			if len(got) != 1 || got[0].EventID != want {
				t.Fatalf("claim after the last one ended = %v; want %s (the oldest of p)", got, want)
			}
			write(t, s, lease.Complete(got[0].Ref()))
		}
		wantPartitionsCounted(t, s, "the end")
	})
}

// Get, GetByEventID and List give each row's partition, and List selects
// the rows of one partition; rows of no partition have none.
func TestRowsShowTheirPartition(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "a-1", Partition: "acme"},
			lease.Event{Kind: "k", EventID: "none-1"},
			lease.Event{Kind: "k", EventID: "a-2", Partition: "acme"},
			lease.Event{Kind: "k", EventID: "b-1", Partition: "beta"},
		)
		if r, err := s.Get(ctx, in[0].ID); err != nil || r.Partition != "acme" {
			t.Errorf("Get = %q, %v; want partition acme", r.Partition, err)
		}
		if r, err := s.GetByEventID(ctx, "none-1"); err != nil || r.Partition != "" {
			t.Errorf("GetByEventID of a row of no partition = %q, %v; want none", r.Partition, err)
		}
		partitionsListed := func(req lease.ListRequest) []string {
			t.Helper()
			rows, err := s.List(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				out = append(out, r.EventID+"@"+r.Partition)
			}
			return out
		}
		if got, want := partitionsListed(lease.ListRequest{}), []string{"a-1@acme", "none-1@", "a-2@acme", "b-1@beta"}; !slices.Equal(got, want) {
			t.Errorf("List = %v; want %v", got, want)
		}
		if got, want := partitionsListed(lease.ListRequest{Partition: "acme"}), []string{"a-1@acme", "a-2@acme"}; !slices.Equal(got, want) {
			t.Errorf("List of partition acme = %v; want %v", got, want)
		}
		if got := partitionsListed(lease.ListRequest{Partition: "gamma", Kind: "k"}); len(got) != 0 {
			t.Errorf("List of a partition without rows = %v; want none", got)
		}
	})
}

// ValidatePartition refuses what no event's partition can be.
func TestValidatePartition(t *testing.T) {
	for _, c := range []struct {
		p  string
		ok bool
	}{
		{"acme", true},
		{strings.Repeat("p", lease.MaxPartitionBytes), true},
		{"", false},
		{strings.Repeat("p", lease.MaxPartitionBytes+1), false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		if err := lease.ValidatePartition(c.p); (err == nil) != c.ok {
			t.Errorf("ValidatePartition(%.20q) = %v; want ok %v", c.p, err, c.ok)
		}
	}
}

// A row set aside and brought back READY (by wake_partitions, in a claim
// of another queue) is found by a claim with floors
// (ClaimRequest.DueFrom), as a key's promoted row is: a worker's claim
// loop reads each level from a second before the latest due time it
// claimed, and a row brought back with the due time it had when it was
// set aside, long before, would wait for the worker's sweep, which takes
// few rows at a time.
func TestPartitionRowBroughtBackIsAboveTheFloors(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setLimit(t, s, partitionLimit("", 1))
		past := time.Now().Add(-time.Minute)
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "first", Partition: "p", RunAt: past},
			lease.Event{Kind: "k", EventID: "behind", Partition: "p", RunAt: past})
		first := claimUntil(t, s, "", 1)
		if len(first) != 1 || first[0].EventID != "first" {
			t.Fatalf("first claim = %v; want first alone", first)
		}
		if got, want := statusesIn(t, s, "p"), map[string]int{"INPROGRESS": 1, "WAITING": 1}; !equalCounts(got, want) {
			t.Fatalf("p's rows: %v; want %v (behind set aside)", got, want)
		}
		write(t, s, lease.Complete(first[0].Ref()))
		// A claim of another queue counts the place given back, and
		// brings behind back READY.
		if got := claimUntil(t, s, "other", 1); len(got) != 0 {
			t.Fatalf("claim of queue other = %v; want nothing", got)
		}
		if got, want := statusesIn(t, s, "p"), map[string]int{"DONE": 1, "READY": 1}; !equalCounts(got, want) {
			t.Fatalf("p's rows after a claim of queue other: %v; want %v (behind brought back)", got, want)
		}
		// The floors of a claim loop that has just claimed rows due now.
		var now time.Time
		if err := s.DB().QueryRow(`SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		floors := make([]time.Time, lease.MaxPriority+1)
		for i := range floors {
			floors[i] = now.Add(-time.Second)
		}
		var got []leasework.Claim
		for range 3 {
			c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, DueFrom: floors})
			got = append(got, c...)
		}
		if len(got) != 1 || got[0].EventID != "behind" {
			t.Fatalf("three claims with floors at %v after first completed = %v; want behind, brought back", floors[0], got)
		}
		wantPartitionsCounted(t, s, "behind claimed")
	})
}
