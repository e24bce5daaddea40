package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// setRateLimit declares l on s or fails the test.
func setRateLimit(t *testing.T, s *lease.Store, l lease.RateLimit) {
	t.Helper()
	if _, _, err := s.SetRateLimit(context.Background(), l, "test"); err != nil {
		t.Fatal(err)
	}
}

// ageStarts moves every start a rate limit counts d into the past: the
// fixture that stands for time passing, as ExpireLease does for a lease.
func ageStarts(t *testing.T, s *lease.Store, d time.Duration) {
	t.Helper()
	if _, err := s.DB().Exec(`UPDATE `+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_rate_shares")+`
		SET starts = ARRAY(SELECT t - $1 * interval '1 microsecond' FROM unnest(starts) AS t ORDER BY t)`, d.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

// A kind's rate limit admits Max starts in any window of Per: the rows past
// it stay READY while other kinds are claimed, an ended attempt gives no
// start back, NextWake and RateLimits say when the window allows again,
// and the rows are claimed once it does.
func TestRateLimitBoundsStartsPerWindow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "a", Max: 3, Per: time.Hour})
		pgtest.EnqueueN(t, s, 10, "a")
		pgtest.EnqueueN(t, s, 2, "b")
		first, heldBack := claimAll(t, s, lease.ClaimRequest{Limit: 100})
		if got := kindsOf(first); got["a"] != 3 || got["b"] != 2 {
			t.Fatalf("first claim = %v; want 3 of a and 2 of b", got)
		}
		if !heldBack {
			t.Error("first claim: heldBack false; the rate limit held rows back")
		}
		for _, c := range first {
			write(t, s, lease.Complete(c.Ref()))
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100}); len(got) != 0 {
			t.Fatalf("claim in the same window after the attempts ended = %v; want none (an ended attempt has started)", kindsOf(got))
		}
		d, ok, err := s.NextWake(ctx, "")
		if err != nil || !ok || d < 59*time.Minute || d > time.Hour {
			t.Errorf("NextWake = %v, %v, %v; want about an hour (the oldest start leaves the window)", d, ok, err)
		}
		rls, err := s.RateLimits(ctx)
		if err != nil || len(rls) != 1 {
			t.Fatalf("RateLimits = %+v, %v", rls, err)
		}
		if l := rls[0]; l.Recent != 3 || l.Max != 3 || l.Per != time.Hour || l.NextAt.IsZero() {
			t.Errorf("RateLimits: %+v; want 3 recent of 3 per hour, and when it next has room", l)
		}

		// Half the window on, still full; past it, three more.
		ageStarts(t, s, 30*time.Minute)
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100}); len(got) != 0 {
			t.Fatalf("claim half a window on = %v; want none", kindsOf(got))
		}
		ageStarts(t, s, 30*time.Minute+time.Second)
		again, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100})
		if got := kindsOf(again); got["a"] != 3 || len(again) != 3 {
			t.Fatalf("claim after the window = %v; want 3 of a", got)
		}
		if rls, err := s.RateLimits(ctx); err != nil || rls[0].Recent != 3 || !rls[0].NextAt.After(time.Now().Add(30*time.Minute)) {
			t.Errorf("RateLimits after the second window's claim = %+v, %v; want 3 recent, the old starts gone", rls, err)
		}
	})
}

// An event's cost takes that many starts; the claim keeps its order, and
// takes no row after one that does not fit.
func TestRateLimitCountsCosts(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "c", Max: 5, Per: time.Hour})
		for i, cost := range []int{2, 2, 2, 1} {
			pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: fmt.Sprint("c-", i), Cost: cost})
		}
		got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
		if fmt.Sprint(got) != "[c-0 c-1]" {
			t.Fatalf("claim = %v; want c-0 and c-1 (4 of 5 starts; c-2 costs 2)", got)
		}
		ageStarts(t, s, time.Hour+time.Second)
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
		if fmt.Sprint(got) != "[c-2 c-3]" {
			t.Fatalf("claim after the window = %v; want c-2 and c-3", got)
		}
	})
}

// A queue's rate limit counts the starts of every kind of the queue, and
// a retry, a take-back after a lease ran out and a first attempt each
// start.
func TestQueueRateLimitCountsEveryStart(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeQueue, Name: "q", Max: 4, Per: time.Hour})
		for i := range 2 {
			pgtest.Enqueue(t, s, lease.Event{Kind: "x", EventID: fmt.Sprint("x-", i), Queue: "q"},
				lease.Event{Kind: "y", EventID: fmt.Sprint("y-", i), Queue: "q"})
		}
		pgtest.Enqueue(t, s, lease.Event{Kind: "x", EventID: "x-late", Queue: "q"})
		first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100, Queue: "q"})
		if len(first) != 4 {
			t.Fatalf("claim of queue q took %d; want 4", len(first))
		}
		write(t, s, lease.Retry(first[0].Ref(), 0, "again"))
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100, Queue: "q"}); len(got) != 0 {
			t.Fatalf("claim in the first window after a retry = %d rows; want none", len(got))
		}
		ageStarts(t, s, time.Hour+time.Second)
		second, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100, Queue: "q"})
		if len(second) != 2 || !containsID(second, first[0].ID) {
			t.Fatalf("claim after the window = %d rows; want 2, the retried row among them", len(second))
		}
		rls, err := s.RateLimits(context.Background())
		if err != nil || len(rls) != 1 || rls[0].Recent != 2 {
			t.Errorf("RateLimits = %+v, %v; want 2 starts in the window (the retry's and x-late's)", rls, err)
		}
	})
}

// A claim takes an event whose cost is more than its Limit in rows, and
// more than the room of one share, while the limit has room for it: the
// shares it takes starts from are chosen for the starts its rows need, not
// for their count. (A claim of Limit 1 took starts from one share, and an
// event that cost more than a share's room never started for it.)
func TestRateLimitSmallClaimTakesACostlyEvent(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		// 10 per hour: shares 0 to 9 allow one start each.
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "c", Max: 10, Per: time.Hour})
		pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: "c-2", Cost: 2},
			lease.Event{Kind: "c", EventID: "c-7", Cost: 7}, lease.Event{Kind: "c", EventID: "c-3", Cost: 3})
		for _, want := range []string{"[c-2]", "[c-7]", "[]"} {
			got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "w"})
			if fmt.Sprint(got) != want {
				t.Fatalf("claim of Limit 1 = %v; want %s (the limit's room: 10 starts per hour, c-2, c-7 and c-3 cost 2, 7 and 3)", got, want)
			}
		}
		if rls, err := s.RateLimits(ctx); err != nil || len(rls) != 1 || rls[0].Recent != 9 {
			t.Errorf("RateLimits = %+v, %v; want 9 starts in the window", rls, err)
		}
	})
}

// A claim whose statement began before another's, and that takes starts
// from a share after the other committed its own there, counts every start
// of its own window: the later claim keeps the starts that are out of its
// window but in the earlier one's. (The later claim dropped the starts
// older than its own window, and the earlier one, blind to them, took a
// share's whole cap again: 49 starts in a window of a limit of 48.)
//
// The earlier claim runs inside a DO block that first waits for an
// advisory lock the test holds: its statement's time is the block's, taken
// before it waits.
func TestRateLimitKeepsTheStartsOfAnEarlierClaimsWindow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// 48 per hour: each of the 16 shares allows 3. All but share 0 are
		// full for the hour.
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "k", Max: 48, Per: time.Hour})
		pgtest.EnqueueN(t, s, 10, "k")
		shares := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_rate_shares")
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+shares+` SET starts = array_fill(clock_timestamp(), ARRAY[cap]) WHERE share <> 0`); err != nil {
			t.Fatal(err)
		}

		hold, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		const lock = 7_310_021
		if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lock); err != nil {
			t.Fatal(err)
		}
		claim := lease.ClaimStatement(s).Query
		if strings.Contains(claim, "$claim$") {
			t.Fatal("the claim statement holds the quote $claim$")
		}
		early := make(chan error, 1)
		go func() {
			_, err := s.DB().ExecContext(ctx, `DO $do$ BEGIN
				PERFORM pg_advisory_xact_lock(`+fmt.Sprint(lock)+`);
				EXECUTE $claim$`+claim+`$claim$ USING 5, ARRAY[]::text[], 60000000::bigint, 'early'::text, 'default'::text,
					ARRAY[]::bigint[], 0::bigint;
			END $do$`)
			early <- err
		}()
		// Once the early claim waits, share 0 gets two starts just inside
		// the early claim's window (its statement began before this one)
		// and outside the late claim's (which begins after this one).
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting bool
			if err := s.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE 'DO $do$%')`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the early claim did not wait for the advisory lock within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+shares+`
			SET starts = array_fill(clock_timestamp() - interval '1 hour', ARRAY[2]) WHERE share = 0`); err != nil {
			t.Fatal(err)
		}
		late := claimEventIDs(t, s, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "late"})
		if len(late) != 1 {
			t.Fatalf("the late claim took %v; want one event (share 0 has room for 3 in its window)", late)
		}
		if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lock); err != nil {
			t.Fatal(err)
		}
		if err := <-early; err != nil {
			t.Fatalf("the early claim: %v", err)
		}
		var took int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.QualifiedTable()+` WHERE worker = 'early'`).Scan(&took); err != nil {
			t.Fatal(err)
		}
		// The early claim's window holds the 45 starts of the full shares
		// and share 0's two: one more start at most.
		if took > 1 {
			t.Errorf("the early claim took %d events; its window held 47 starts of 48, so at most 1", took)
		}
	})
}

// An idle worker is woken when a rate limit has room for the due row it
// holds back, not only when it is full: a limit with one start of room
// left and an event costing 2 has NextWake say when the oldest start
// leaves the window; an event that costs more than the limit's Max, which
// never starts, wakes no one. (NextWake woke a worker only for a full
// limit: one left with room for less than the event's cost slept until
// its next poll.)
func TestNextWakeWhenARateLimitHasRoomForTheHeldBackCost(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "c", Max: 3, Per: time.Hour})
		pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: "c-1", Cost: 2}, lease.Event{Kind: "c", EventID: "c-2", Cost: 2})
		first, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil || len(first) != 1 || first[0].EventID != "c-1" {
			t.Fatalf("claim = %+v, %v; want c-1 alone (c-2 costs 2, one start is left)", first, err)
		}
		write(t, s, lease.Complete(first[0].Ref()))
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim with one start left = %v; want nothing", kindsOf(got))
		}
		d, ok, err := s.NextWake(ctx, "")
		if err != nil || !ok || d < 59*time.Minute || d > time.Hour {
			t.Errorf("NextWake = %v, %v, %v; want about an hour (c-1's starts leave the window, and c-2 fits)", d, ok, err)
		}
		ageStarts(t, s, 30*time.Minute)
		if d, ok, err := s.NextWake(ctx, ""); err != nil || !ok || d < 29*time.Minute || d > 30*time.Minute {
			t.Errorf("NextWake half a window on = %v, %v, %v; want about half an hour", d, ok, err)
		}
		ageStarts(t, s, 30*time.Minute+time.Second)
		second, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil || len(second) != 1 || second[0].EventID != "c-2" {
			t.Fatalf("claim after the window = %+v, %v; want c-2", second, err)
		}
		write(t, s, lease.Complete(second[0].Ref()))

		// An event that costs more than Max never starts: no wake for it.
		pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: "c-big", Cost: 4})
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim of c-big = %v; want nothing", kindsOf(got))
		}
		if d, ok, err := s.NextWake(ctx, ""); err != nil || ok {
			t.Errorf("NextWake with c-big held back = %v, %v, %v; want none (it never starts)", d, ok, err)
		}
	})
}

// NextWake under a rate limit reads, beside what it reads without one,
// the head of each priority level's due rows only, whatever the history
// and the backlog behind them, under either plan (invariant 11).
func TestNextWakeUnderARateLimitReadsTheHeadsOnly(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFinished(ctx, s, 20_000); err != nil {
		t.Fatal(err)
	}
	setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "c", Max: 3, Per: time.Hour})
	var backlog []lease.Event
	for i := range 2000 {
		backlog = append(backlog, lease.Event{Kind: "c", EventID: fmt.Sprint("c-", i), Cost: 2, Priority: i % 3})
	}
	pgtest.Enqueue(t, s, backlog...)
	if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, Lease: 2 * time.Hour}); len(got) != 1 {
		t.Fatalf("claim = %d rows; want 1 (3 starts, each event costs 2)", len(got))
	}
	if _, err := s.DB().ExecContext(ctx, "VACUUM (ANALYZE) "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := shortLines(explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", mode, lease.RowStatements(s)["nextWake"], "'default', 0"))
		read, bufs := rowsRead(plan)
		t.Logf("nextWake under a rate limit, %s: %d rows read, in %d buffers", mode, read, bufs)
		// The lease, a due head and a row not yet due per level; the
		// limit, and its 16 shares twice (their room, their starts).
		const most = 1 + 10 + 10 + 1 + 2*16
		if read > most {
			t.Errorf("nextWake under a rate limit, %s: %d rows read; want at most %d:\n%s", mode, read, most, plan)
		}
	}
	if d, ok, err := s.NextWake(ctx, ""); err != nil || !ok || d < 59*time.Minute {
		t.Errorf("NextWake = %v, %v, %v; want about an hour (one start left, the heads cost 2)", d, ok, err)
	}
}

// containsID says whether claims hold the row of id.
func containsID(claims []leasework.Claim, id int64) bool {
	for _, c := range claims {
		if c.ID == id {
			return true
		}
	}
	return false
}

// Concurrent claimers together start no more than the limit allows in its
// window.
func TestConcurrentClaimsKeepTheRateLimit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "k", Max: 37, Per: time.Hour})
		pgtest.EnqueueN(t, s, 200, "k")
		var started atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for range 20 {
					got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 7, Lease: time.Minute, Worker: fmt.Sprint("w", w)})
					if err != nil {
						t.Error(err)
						return
					}
					started.Add(int64(len(got)))
				}
			})
		}
		wg.Wait()
		if n := started.Load(); n != 37 {
			t.Errorf("8 claimers, 20 claims each, started %d; want 37 (the limit, every share used)", n)
		}
	})
}

// SetRateLimit refuses what it cannot keep, and an event's cost is checked.
func TestSetRateLimitRejectsBadInput(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	for _, l := range []lease.RateLimit{
		{Scope: lease.ScopeKind, Name: "k", Max: 0, Per: time.Second},
		{Scope: lease.ScopeKind, Name: "k", Max: lease.MaxRateStarts + 1, Per: time.Second},
		{Scope: lease.ScopeKind, Name: "k", Max: 1, Per: 0},
		{Scope: lease.ScopeKind, Name: "k", Max: 1, Per: 25 * time.Hour},
		{Scope: lease.ScopeKind, Name: "k", Max: 1, Per: time.Second + time.Nanosecond},
		{Scope: lease.ScopePartition, Name: "p", Max: 0, Per: time.Second},
		{Scope: lease.ScopePartition, Name: strings.Repeat("p", lease.MaxPartitionBytes+1), Max: 1, Per: time.Second},
		{Scope: "tenant", Name: "p", Max: 1, Per: time.Second},
		{Scope: lease.ScopeKind, Name: "", Max: 1, Per: time.Second},
	} {
		if _, _, err := s.SetRateLimit(ctx, l, ""); err == nil {
			t.Errorf("SetRateLimit(%+v): no error", l)
		}
	}
	old, had, err := s.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopeKind, Name: "k", Max: 2, Per: time.Second}, "a")
	if err != nil || had {
		t.Fatalf("first SetRateLimit: %+v, %v, %v; want none replaced", old, had, err)
	}
	old, had, err = s.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopeKind, Name: "k", Max: 5, Per: time.Minute}, "b")
	if err != nil || !had || old.Max != 2 || old.Per != time.Second {
		t.Fatalf("second SetRateLimit: %+v, %v, %v; want 2 per second replaced", old, had, err)
	}
	changes, err := s.LimitChanges(ctx, 10)
	if err != nil || len(changes) != 2 || changes[0].Scope != "rate:kind" || changes[0].Old != 2 || changes[0].New != 5 ||
		changes[0].Per != time.Minute || changes[1].Per != time.Second {
		t.Errorf("LimitChanges = %+v, %v; want the two rate changes, latest first, with the periods they set", changes, err)
	}
	if ok, err := s.ClearRateLimit(ctx, lease.ScopeKind, "k", "c"); err != nil || !ok {
		t.Errorf("ClearRateLimit = %v, %v; want true", ok, err)
	}
	if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 1}, "d"); err != nil {
		t.Fatal(err)
	}
	changes, err = s.LimitChanges(ctx, 2)
	if err != nil || len(changes) != 2 || changes[0].Scope != lease.ScopeKind || changes[0].Per != 0 ||
		changes[1].Scope != "rate:kind" || changes[1].Old != 5 || changes[1].New != -1 || changes[1].Per != time.Minute {
		t.Errorf("LimitChanges = %+v, %v; want a concurrency limit's change with no period, then the clear with the period cleared", changes, err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Cost: lease.MaxCost + 1}); err == nil {
		t.Error("Enqueue with a Cost past MaxCost: no error")
	}
}

// ParseRate reads M/PERIOD, a unit alone standing for one of it, and
// refuses what SetRateLimit would; String writes what it reads.
func TestParseRate(t *testing.T) {
	for in, want := range map[string]lease.RateLimit{
		"100/1m":     {Max: 100, Per: time.Minute},
		" 5 / 500ms": {Max: 5, Per: 500 * time.Millisecond},
		"100/s":      {Max: 100, Per: time.Second},
		"100/m":      {Max: 100, Per: time.Minute},
		"2000/24h":   {Max: 2000, Per: 24 * time.Hour},
		"1/1.5s":     {Max: 1, Per: 1500 * time.Millisecond},
		"10000/1ms":  {Max: lease.MaxRateStarts, Per: lease.MinRatePeriod},
	} {
		m, per, err := lease.ParseRate(in)
		if err != nil || m != want.Max || per != want.Per {
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v", in, m, per, err, want.Max, want.Per)
			continue
		}
		if again, againPer, err := lease.ParseRate(want.String()); err != nil || again != m || againPer != per {
			t.Errorf("ParseRate(%q), of String = %d, %v, %v; want %d, %v", want.String(), again, againPer, err, m, per)
		}
	}
	for in, wantErr := range map[string]string{
		"100":      "write it as M/PERIOD",
		"x/1m":     `"x" is not a whole number`,
		"100/":     `the period "" is not a duration`,
		"100/fort": `the period "1fort" is not a duration`,
		"0/1m":     "0 starts; it must be from 1 to 10000",
		"10001/1m": "10001 starts",
		"5/25h":    "a period of 25h0m0s; it must be from 1ms to 24h0m0s",
		"5/1500ns": "in whole microseconds",
		"5/-1m":    "a period of -1m0s",
	} {
		if _, _, err := lease.ParseRate(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseRate(%q) = %v; want an error saying %q", in, err, wantErr)
		}
	}
}

// An event that costs more than its rate limit allows in a period never
// starts, and takes no start from the events behind it.
func TestRateLimitPassesOverAnEventCostingMoreThanMax(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "c", Max: 10, Per: time.Hour})
		pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: "too-costly", Cost: 11})
		pgtest.Enqueue(t, s, lease.Event{Kind: "c", EventID: "cheap", Cost: 1})
		got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
		if fmt.Sprint(got) != "[cheap]" {
			t.Fatalf("claim = %v; want cheap alone (too-costly never fits a window of 10)", got)
		}
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 5, Per: time.Hour})
		pgtest.Enqueue(t, s, lease.Event{Kind: "d", EventID: "too-costly-for-the-queue", Cost: 6})
		pgtest.Enqueue(t, s, lease.Event{Kind: "d", EventID: "cheap-too", Cost: 2})
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
		if fmt.Sprint(got) != "[cheap-too]" {
			t.Fatalf("claim under the queue's limit = %v; want cheap-too alone", got)
		}
	})
}
