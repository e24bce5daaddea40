package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// partitionRate is the rate limit of partition p (empty: the default).
func partitionRate(p string, max int, per time.Duration) lease.RateLimit {
	return lease.RateLimit{Scope: lease.ScopePartition, Name: p, Max: max, Per: per}
}

// agePartitionStarts moves every start the partitions' slots count, and
// every timer, d into the past: the fixture that stands for time passing
// under partition rate limits, as ageStarts is for the others.
func agePartitionStarts(t *testing.T, s *lease.Store, d time.Duration) {
	t.Helper()
	name := func(suffix string) string {
		return lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_"+suffix)
	}
	if _, err := s.DB().Exec(`UPDATE `+name("partition_slots")+`
		SET starts = ARRAY(SELECT t - $1 * interval '1 microsecond' FROM unnest(starts) AS t ORDER BY t)`, d.Microseconds()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`UPDATE `+name("partition_timers")+` SET at = at - $1 * interval '1 microsecond'`, d.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

// A partition rate limit holds each partition to its own Max per window,
// or the default's, while rows of no partition are claimed past them; the
// rows held back are set aside (WAITING without a key), NextWake says when
// the window has room, and once it has, the claims take them.
func TestPartitionRateLimitHoldsEachPartition(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setRateLimit(t, s, partitionRate("", 2, time.Hour))
		setRateLimit(t, s, partitionRate("big", 5, time.Hour))
		for _, p := range []string{"a", "b", "big"} {
			enqueueIn(t, s, p, "", 8)
		}
		pgtest.EnqueueN(t, s, 3, "k")

		first := claimUntil(t, s, "", 3)
		if got := partitionsOf(t, s, first); got["a"] != 2 || got["b"] != 2 || got["big"] != 5 || got[""] != 3 {
			t.Fatalf("claims = %v; want 2 of a, 2 of b, 5 of big, and the 3 rows of no partition", got)
		}
		for _, c := range first {
			write(t, s, lease.Complete(c.Ref()))
		}
		if got := claimUntil(t, s, "", 2); len(got) != 0 {
			t.Fatalf("claims in the same window after the attempts ended = %v; want none (an ended attempt has started)", partitionsOf(t, s, got))
		}
		for p, want := range map[string]int{"a": 6, "b": 6, "big": 3} {
			if got := statusesIn(t, s, p); got["WAITING"] != want || got["READY"] != 0 {
				t.Errorf("partition %s: %v; want its %d rows held back set aside (WAITING), none READY", p, got, want)
			}
		}
		d, ok, err := s.NextWake(ctx, "")
		if err != nil || !ok || d < 59*time.Minute || d > time.Hour {
			t.Errorf("NextWake = %v, %v, %v; want about an hour (the oldest start leaves the window)", d, ok, err)
		}
		rls, err := s.RateLimits(ctx)
		if err != nil || len(rls) != 2 {
			t.Fatalf("RateLimits = %+v, %v; want the two partition limits", rls, err)
		}
		if l := rls[0]; l.Scope != lease.ScopePartition || l.Name != "" || l.Recent != 4 || l.HeldBack != 12 || !l.NextAt.IsZero() {
			t.Errorf("RateLimits: default %+v; want 4 recent and 12 held back over a and b", l)
		}
		if l := rls[1]; l.Name != "big" || l.Recent != 5 || l.HeldBack != 3 || l.NextAt.Before(time.Now().Add(59*time.Minute)) {
			t.Errorf("RateLimits: big %+v; want 5 recent of 5, 3 held back, room again in about an hour", l)
		}

		// Half the window on, still full; past it, as many again.
		agePartitionStarts(t, s, 30*time.Minute)
		if got := claimUntil(t, s, "", 2); len(got) != 0 {
			t.Fatalf("claims half a window on = %v; want none", partitionsOf(t, s, got))
		}
		agePartitionStarts(t, s, 30*time.Minute+time.Second)
		again := claimUntil(t, s, "", 3)
		if got := partitionsOf(t, s, again); got["a"] != 2 || got["b"] != 2 || got["big"] != 3 || len(again) != 7 {
			t.Fatalf("claims after the window = %v; want 2 of a, 2 of b, the last 3 of big", got)
		}
		// Each partition's rows in their order: the second window takes
		// rows 3 and 4.
		for _, c := range again {
			if c.EventID != "" && (c.EventID == "a-1" || c.EventID == "a-2" || c.EventID == "a-5") {
				t.Errorf("second window claimed %s; want a-3 and a-4, in order", c.EventID)
			}
		}
	})
}

// An event's cost takes that many of its partition's starts; one costing
// more than the partition's Max never starts, and takes nothing from the
// rows behind it.
func TestPartitionRateLimitCountsCosts(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setRateLimit(t, s, partitionRate("p", 5, time.Hour))
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "three", Partition: "p", Cost: 3},
			lease.Event{Kind: "k", EventID: "six", Partition: "p", Cost: 6},
			lease.Event{Kind: "k", EventID: "two", Partition: "p", Cost: 2},
			lease.Event{Kind: "k", EventID: "one", Partition: "p", Cost: 1})
		got := claimUntil(t, s, "", 3)
		ids := map[string]bool{}
		for _, c := range got {
			ids[c.EventID] = true
		}
		if len(got) != 2 || !ids["three"] || !ids["two"] {
			t.Fatalf("claims = %v; want three and two (5 starts), six never, one held back", ids)
		}
		if st := statusesIn(t, s, "p"); st["WAITING"] != 2 {
			t.Errorf("partition p: %v; want six and one set aside", st)
		}
		agePartitionStarts(t, s, time.Hour+time.Second)
		got = claimUntil(t, s, "", 3)
		if len(got) != 1 || got[0].EventID != "one" {
			t.Fatalf("claims after the window = %v; want one alone (six costs more than the limit allows)", got)
		}
		// Raised to 6, six fits in the next window.
		setRateLimit(t, s, partitionRate("p", 6, time.Hour))
		agePartitionStarts(t, s, time.Hour+time.Second)
		got = claimUntil(t, s, "", 3)
		if len(got) != 1 || got[0].EventID != "six" {
			t.Fatalf("claims after the limit was raised = %v; want six", got)
		}
	})
}

// A partition under both a concurrency limit and a rate limit keeps both;
// an expired lease taken back is a start; clearing the rate limit brings
// the rows it set aside back.
func TestPartitionRateComposesWithItsConcurrencyLimit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, partitionLimit("p", 1))
		setRateLimit(t, s, partitionRate("p", 3, time.Hour))
		enqueueIn(t, s, "p", "", 6)

		for i := range 2 {
			got := claimUntil(t, s, "", 2)
			if len(got) != 1 || got[0].EventID != fmt.Sprintf("p-%d", i+1) {
				t.Fatalf("round %d: claims = %+v; want p-%d alone (the concurrency limit of 1, in order)", i, got, i+1)
			}
			write(t, s, lease.Complete(got[0].Ref()))
		}
		// The third start: its lease runs out, and taking it back is a
		// fourth, which the rate limit does not allow.
		got := claimUntil(t, s, "", 2)
		if len(got) != 1 {
			t.Fatalf("third claim = %d rows; want 1", len(got))
		}
		if err := leasetest.ExpireLease(ctx, s, got[0].ID); err != nil {
			t.Fatal(err)
		}
		if again := claimUntil(t, s, "", 2); len(again) != 0 {
			t.Fatalf("claims after the third start's lease ran out = %v; want none (taking it back is a fourth start)", again)
		}
		wantPartitionsCounted(t, s, "the lease ran out")

		if ok, err := s.ClearRateLimit(ctx, lease.ScopePartition, "p", "test"); err != nil || !ok {
			t.Fatalf("ClearRateLimit = %v, %v", ok, err)
		}
		again := claimUntil(t, s, "", 2)
		if len(again) != 1 || again[0].EventID != got[0].EventID {
			t.Fatalf("claims after the rate limit was cleared = %v; want the expired lease taken back, alone (concurrency 1)", again)
		}
		write(t, s, lease.Complete(again[0].Ref()))
		for range 3 {
			c := claimUntil(t, s, "", 2)
			if len(c) != 1 {
				t.Fatalf("claims under the concurrency limit alone = %d; want 1", len(c))
			}
			write(t, s, lease.Complete(c[0].Ref()))
		}
		if st := statusesIn(t, s, "p"); st["DONE"] != 6 {
			t.Errorf("partition p: %v; want all 6 DONE", st)
		}
		changes, err := s.LimitChanges(ctx, 1)
		if err != nil || len(changes) != 1 || changes[0].Scope != "rate:partition" || changes[0].Name != "p" ||
			changes[0].Old != 3 || changes[0].New != -1 || changes[0].Per != time.Hour || changes[0].By != "test" {
			t.Errorf("LimitChanges = %+v, %v; want the clear of p's rate limit", changes, err)
		}
	})
}

// Under 8 concurrent claimers, each partition starts no more than its
// Max in the window, however the claims interleave, and every row of no
// partition is claimed.
func TestConcurrentClaimsKeepPartitionRateLimits(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		const max, parts, each = 7, 4, 20
		setRateLimit(t, s, partitionRate("", max, time.Hour))
		for i := range parts {
			enqueueIn(t, s, fmt.Sprintf("p%d", i), "", each)
		}
		pgtest.EnqueueN(t, s, 30, "free")
		var mu sync.Mutex
		var all []leasework.Claim
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 6 {
					got, err := s.Claim(context.Background(), lease.ClaimRequest{Limit: 5, Lease: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					for _, c := range got {
						if _, err := s.Write(context.Background(), lease.Complete(c.Ref())); err != nil {
							t.Error(err)
						}
					}
					mu.Lock()
					all = append(all, got...)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		all = append(all, claimUntil(t, s, "", 3)...)
		got := partitionsOf(t, s, all)
		for i := range parts {
			if p := fmt.Sprintf("p%d", i); got[p] != max {
				t.Errorf("partition %s: %d started; want %d (its Max in the window)", p, got[p], max)
			}
		}
		if got[""] != 30 {
			t.Errorf("rows of no partition claimed: %d; want 30", got[""])
		}
	})
}

// WhyNotRunning tells a row its partition's rate limit set aside, or
// holds READY, which limit (the partition's own or the default), its
// starts in the window, and when it has room again; a row set aside by
// both of its partition's limits has both reasons.
func TestWhyAPartitionRateLimitHoldsARow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		def := partitionRate("", 1, time.Minute)
		setRateLimit(t, s, def)
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", Partition: "acme"}, lease.Event{Kind: "k", Partition: "acme"},
			lease.Event{Kind: "k", Partition: "acme", Cost: 2})
		wantNoReason(t, s, in[1].ID, "a due row of a partition with room")
		if c := claimUntil(t, s, "", 2); len(c) != 1 || c[0].ID != in[0].ID {
			t.Fatalf("claims = %+v; want the first row alone", c)
		}
		oldest := partitionStart(t, s, "acme")
		rs := why(t, s, in[1].ID)
		if len(rs) != 1 || rs[0].Kind != lease.ReasonRate || rs[0].Rate != def || rs[0].Partition != "acme" || !rs[0].SetAside ||
			rs[0].Recent != 1 || !rs[0].NextAt.Equal(oldest.Add(time.Minute)) {
			t.Fatalf("reasons of a row the default partition rate set aside = %+v; want the default, 1 recent, room at %v", rs, oldest.Add(time.Minute))
		}
		want := fmt.Sprintf("held by rate limit partition default (1/1 starts per 1m0s in partition acme): the next start is allowed at %s (in %s, by the database clock); or when the limit is raised or cleared",
			oldest.Add(time.Minute).UTC().Format("2006-01-02 15:04:05Z"), rs[0].NextIn.Round(time.Second))
		if rs[0].Text != want {
			t.Errorf("text %q; want %q", rs[0].Text, want)
		}
		if rs := why(t, s, in[2].ID); len(rs) != 1 || rs[0].Cost != 2 || !rs[0].NextAt.IsZero() ||
			!strings.Contains(rs[0].Text, "it costs 2 starts, more than the limit allows in a window") {
			t.Errorf("reasons of a row costing more than the partition's Max = %+v", rs)
		}

		// Its own limit, and a full concurrency limit too: both reasons.
		own := partitionRate("acme", 1, time.Hour)
		setRateLimit(t, s, own)
		setLimit(t, s, partitionLimit("acme", 1))
		agePartitionStarts(t, s, time.Hour+time.Second)
		if c := claimUntil(t, s, "", 2); len(c) != 1 || c[0].ID != in[1].ID {
			t.Fatalf("claims a window on = %+v; want the second row alone", c)
		}
		late := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Partition: "acme"})[0].ID
		if c := claimUntil(t, s, "", 2); len(c) != 0 {
			t.Fatalf("claims = %+v; want none", c)
		}
		rs = why(t, s, late)
		kinds := map[lease.ReasonKind]lease.Reason{}
		for _, r := range rs {
			kinds[r.Kind] = r
		}
		if len(rs) != 2 || kinds[lease.ReasonRate].Rate != own || kinds[lease.ReasonPartition].Partition != "acme" {
			t.Errorf("reasons under both of the partition's limits = %+v; want its own rate limit and its concurrency limit", rs)
		}
		if !strings.HasPrefix(kinds[lease.ReasonRate].Text, "held by rate limit partition:acme (1/1 starts per 1h0m0s)") {
			t.Errorf("text %q; want it to name partition acme's own limit", kinds[lease.ReasonRate].Text)
		}
	})
}

// partitionStart is the oldest start partition p's slot counts.
func partitionStart(t *testing.T, s *lease.Store, p string) time.Time {
	t.Helper()
	var at time.Time
	if err := s.DB().QueryRow(`SELECT min(t) FROM `+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_partition_slots")+`
		AS s CROSS JOIN LATERAL unnest(s.starts) AS t WHERE s.partition = $1`, p).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// An event that costs more than its partition's rate limit allows in a
// window is set aside for good, with no timer: it wakes no one, however
// long it waits (a timer left due once made idle workers poll without
// rest), until the limit is raised, and then it starts.
func TestPartitionRateTooCostlyEventWakesNoOne(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		setRateLimit(t, s, partitionRate("p", 1, time.Hour))
		costly := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Partition: "p", Cost: 2})[0].ID
		for round, age := range []time.Duration{0, time.Hour + time.Second, time.Hour + time.Second} {
			agePartitionStarts(t, s, age)
			if got := claimUntil(t, s, "", 3); len(got) != 0 {
				t.Fatalf("round %d: claims = %+v; want none (it costs 2, the limit allows 1)", round, got)
			}
			if st := statusesIn(t, s, "p"); st["WAITING"] != 1 {
				t.Errorf("round %d: partition p: %v; want the row set aside", round, st)
			}
			if d, ok, err := s.NextWake(ctx, ""); err != nil || ok {
				t.Errorf("round %d: NextWake = %v, %v, %v; want nothing ahead (no time gives it room)", round, d, ok, err)
			}
		}
		setRateLimit(t, s, partitionRate("p", 2, time.Hour))
		if got := claimUntil(t, s, "", 3); len(got) != 1 || got[0].ID != costly {
			t.Fatalf("claims after the limit was raised = %+v; want the row", got)
		}
	})
}

// A claim of one queue that counts its partition's look-again (written
// when a limit changed, or rows came back) leaves one after it while the
// partition keeps rows set aside of another queue, which the claim does
// not read: they are brought back by the next claims, not an hour later
// when their timer rings. Under a concurrency limit alone, the same: no
// attempt of the partition may end again to wake them.
func TestPartitionLookAgainOfAnotherQueuesRowIsKept(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, limit := range []string{"rate", "concurrency"} {
			t.Run(limit, func(t *testing.T) {
				s := pgtest.Store(t, drv, lease.Options{})
				if limit == "rate" {
					setRateLimit(t, s, partitionRate("p", 1, time.Hour))
				} else {
					setLimit(t, s, partitionLimit("p", 1))
				}
				in := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Partition: "p"}, lease.Event{Kind: "k", Partition: "p"})
				first := claimUntil(t, s, "", 2)
				if len(first) != 1 || first[0].ID != in[0].ID {
					t.Fatalf("claims of the default queue = %+v; want the first row alone", first)
				}
				if st := statusesIn(t, s, "p"); st["WAITING"] != 1 {
					t.Fatalf("partition p: %v; want the second row set aside", st)
				}
				if limit == "concurrency" {
					write(t, s, lease.Complete(first[0].Ref()))
				}
				mail := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Partition: "p", Queue: "mail"})[0].ID
				// A raise looks again at the partition's rows set aside.
				if limit == "rate" {
					setRateLimit(t, s, partitionRate("p", 3, time.Hour))
				} else {
					setLimit(t, s, partitionLimit("p", 2))
				}
				if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1, Queue: "mail"}); len(got) != 1 || got[0].ID != mail {
					t.Fatalf("claim of queue mail = %+v; want its row", got)
				}
				if got := claimUntil(t, s, "", 2); len(got) != 1 || got[0].ID != in[1].ID {
					t.Fatalf("claims of the default queue after = %+v; want the row set aside, brought back", got)
				}
			})
		}
	})
}
