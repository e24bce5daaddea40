package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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

// setLimit declares l on s or fails the test.
func setLimit(t *testing.T, s *lease.Store, l lease.Limit) {
	t.Helper()
	if _, err := s.SetLimit(context.Background(), l, "test"); err != nil {
		t.Fatal(err)
	}
}

// claimAll claims up to limit rows with heldBack, failing the test on error.
func claimAll(t *testing.T, s *lease.Store, req lease.ClaimRequest) ([]leasework.Claim, bool) {
	t.Helper()
	if req.Lease == 0 {
		req.Lease = time.Minute
	}
	claims, heldBack, err := s.ClaimHeldBack(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return claims, heldBack
}

// kindsOf counts claims per kind.
func kindsOf(claims []leasework.Claim) map[string]int {
	n := map[string]int{}
	for _, c := range claims {
		n[c.Kind]++
	}
	return n
}

// write writes w and fails the test unless it is accepted.
func write(t *testing.T, s *lease.Store, w lease.Write) {
	t.Helper()
	res, err := s.Write(context.Background(), w)
	if err != nil {
		t.Fatalf("%v: %v", res.Verdict, err)
	}
}

// A kind's limit bounds its live attempts across claims, while other
// kinds of the queue are claimed past the rows it holds back; an ended
// attempt gives its slot back.
func TestKindLimitBoundsLiveAttempts(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 2})
		pgtest.EnqueueN(t, s, 5, "a")
		pgtest.EnqueueN(t, s, 3, "b")
		claims, heldBack := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if got := kindsOf(claims); got["a"] != 2 || got["b"] != 3 {
			t.Fatalf("first claim took %v; want 2 of a (its limit) and 3 of b", got)
		}
		if !heldBack {
			t.Error("first claim: heldBack is false; kind a's limit kept 3 rows from it")
		}
		more, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(more) != 0 {
			t.Fatalf("second claim took %v; want nothing while a is at its limit", kindsOf(more))
		}
		limits, err := s.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(limits) != 1 || limits[0].Live != 2 || limits[0].Max != 2 || limits[0].SetBy != "test" {
			t.Fatalf("Limits = %+v; want kind a, 2 live of 2, set by test", limits)
		}
		for _, c := range claims {
			if c.Kind == "a" {
				write(t, s, lease.Complete(c.Ref()))
				break
			}
		}
		more, _ = claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if got := kindsOf(more); got["a"] != 1 || len(more) != 1 {
			t.Fatalf("claim after one a completed took %v; want 1 of a", got)
		}
	})
}

// A queue's limit bounds the rows a claim takes from it, and the expired
// leases a claim takes back count against it like new claims.
func TestQueueLimitBoundsClaims(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 3})
		pgtest.EnqueueN(t, s, 6, "k")
		claims, heldBack := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(claims) != 3 || !heldBack {
			t.Fatalf("claim took %d rows (heldBack %v); want 3, the queue's limit, held back", len(claims), heldBack)
		}
		if _, err := leasetest.ExpireAllLeases(ctx, s); err != nil {
			t.Fatal(err)
		}
		// A claim with a floor for expired leases (the worker's claims
		// between sweeps) does not walk the held slots: each expired
		// lease brings its own.
		again, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, ExpiredFrom: time.Unix(1, 0)})
		reclaimed := 0
		for _, c := range again {
			if c.Reclaimed {
				reclaimed++
			}
		}
		if len(again) != 3 || reclaimed != 3 {
			t.Fatalf("claim after the leases ran out took %d rows, %d of them reclaimed; want the 3 expired ones", len(again), reclaimed)
		}
		// The first owners' late writes are refused.
		for _, c := range claims {
			if _, err := s.Write(ctx, lease.Complete(c.Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
				t.Errorf("late completion of generation %d: %v; want ErrLeaseLost", c.Generation, err)
			}
		}
	})
}

// A place whose holder's lease ran out is free: a killed owner holds it
// no longer than its lease. Here the holder cannot be claimed again (its
// budget is spent): the claim that ends it FAILED gives its place back as
// it commits, and the next claim takes the next row.
func TestSlotFreesWhenItsLeaseRunsOut(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "first", MaxAttempts: 1})
		pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "second"})
		first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(first) != 1 || first[0].EventID != "first" {
			t.Fatalf("claim = %v; want first alone", first)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); len(got) != 0 {
			t.Fatalf("claim while first's lease runs = %v; want nothing", got)
		}
		if err := leasetest.ExpireLease(ctx, s, first[0].ID); err != nil {
			t.Fatal(err)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); len(got) != 0 {
			t.Fatalf("claim that ends first = %v; want nothing (first's place is given back at its commit)", got)
		}
		row, err := s.Get(ctx, first[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != leasework.StatusFailed {
			t.Errorf("first is %s; want FAILED (its lease ran out on its last attempt)", row.Status)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); strings.Join(got, ",") != "second" {
			t.Fatalf("claim after first ended = %v; want second", got)
		}
		if _, err := s.Write(ctx, lease.Complete(first[0].Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("first's late completion: %v; want ErrLeaseLost", err)
		}
	})
}

// Every way an attempt ends gives its slot back: each outcome, a release,
// a delete at completion.
func TestEveryEndGivesTheSlotBack(t *testing.T) {
	ends := map[string]func(t *testing.T, s *lease.Store, c leasework.Claim){
		"complete":        func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.Complete(c.Ref())) },
		"complete-delete": func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.CompleteAndDelete(c.Ref())) },
		"retry":           func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.Retry(c.Ref(), 0, "again")) },
		"snooze":          func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.Snooze(c.Ref(), 0, "later")) },
		"fail":            func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.Fail(c.Ref(), "no")) },
		"release":         func(t *testing.T, s *lease.Store, c leasework.Claim) { write(t, s, lease.Release(c.Ref())) },
	}
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for name, end := range ends {
			t.Run(name, func(t *testing.T) {
				s := pgtest.Store(t, drv, lease.Options{})
				setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
				pgtest.EnqueueN(t, s, 3, "a")
				first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
				if len(first) != 1 {
					t.Fatalf("claim took %d; want 1", len(first))
				}
				end(t, s, first[0])
				next, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
				if len(next) != 1 {
					t.Fatalf("claim after the attempt ended by %s took %d; want 1", name, len(next))
				}
			})
		}
	})
}

// A lowered limit binds new claims at once, while the attempts that held
// the slots past it run on outside it; a raised one admits more at once;
// a cleared one holds nothing back; a limit of 0 holds everything.
func TestChangingALimit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 3})
		pgtest.EnqueueN(t, s, 10, "a")
		held, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(held) != 3 {
			t.Fatalf("claim took %d; want 3", len(held))
		}
		old, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1}, "lowering")
		if err != nil || old != 3 {
			t.Fatalf("SetLimit = %d, %v; want the old limit, 3", old, err)
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim under a limit lowered to 1, its slot held, took %d; want 0", len(got))
		}
		// The claims are in id order: held[0] holds slot 0, the one kept.
		write(t, s, lease.Complete(held[1].Ref()))
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim after an attempt outside the lowered limit ended took %d; want 0 (slot 0 is still held)", len(got))
		}
		write(t, s, lease.Complete(held[0].Ref()))
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 1 {
			t.Fatalf("claim after slot 0's holder ended took %d; want 1", len(got))
		}
		write(t, s, lease.Complete(held[2].Ref()))
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 4})
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 3 {
			t.Fatalf("claim with 1 live under a limit raised to 4 took %d; want 3", len(got))
		}
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 0})
		if _, err := leasetest.ExpireAllLeases(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim under a limit of 0 took %d; want 0, even of the expired leases", len(got))
		}
		if ok, err := s.ClearLimit(ctx, lease.ScopeKind, "a", "clearing"); err != nil || !ok {
			t.Fatalf("ClearLimit = %v, %v; want true", ok, err)
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 10-3 {
			t.Fatalf("claim without the limit took %d; want the 7 rows not DONE", len(got))
		}
		changes, err := s.LimitChanges(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range changes {
			got = append(got, fmt.Sprintf("%d>%d by %s", c.Old, c.New, c.By))
		}
		want := "0>-1 by clearing,4>0 by test,1>4 by test,3>1 by lowering,-1>3 by test"
		if strings.Join(got, ",") != want {
			t.Errorf("LimitChanges = %v; want %s", got, want)
		}
	})
}

// Bad limits are refused with errors that name the field.
func TestSetLimitRejectsBadInput(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		l    lease.Limit
		want string
	}{
		{lease.Limit{Scope: "tenant", Name: "a", Max: 1}, `Scope is "tenant"`},
		{lease.Limit{Scope: lease.ScopeKind, Name: "", Max: 1}, "Name is empty"},
		{lease.Limit{Scope: lease.ScopeQueue, Name: strings.Repeat("q", lease.MaxQueueBytes+1), Max: 1}, "at most 128"},
		{lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: -1}, "Max is -1"},
		{lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: lease.MaxLimit + 1}, "Max is 10001"},
	} {
		if _, err := s.SetLimit(ctx, tc.l, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetLimit(%+v) = %v; want an error saying %q", tc.l, err, tc.want)
		}
	}
	if limits, err := s.Limits(ctx); err != nil || len(limits) != 0 {
		t.Errorf("Limits after refused sets = %v, %v; want none", limits, err)
	}
}

// Eight claimers completing at random never hold more than the limit
// live: a reader counts the unexpired INPROGRESS rows of the kind, each
// count one snapshot, as fast as it can.
func TestConcurrentClaimsKeepTheLimit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const limit, rows = 5, 600
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: limit})
		pgtest.EnqueueN(t, s, rows, "a")
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 9)
		for g := range 8 {
			wg.Go(func() {
				for done.Load() < rows && ctx.Err() == nil {
					claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1 + g%3, Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					for _, c := range claims {
						if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
							errs <- err
							return
						}
						done.Add(1)
					}
				}
			})
		}
		count := "SELECT count(*) FROM " + s.QualifiedTable() + " WHERE kind = 'a' AND status = 'INPROGRESS' AND lease_until > now()"
		var samples, most int
		// A liveness bound, generous for a busy machine: the claimers
		// may stall without an error (a claim that always finds nothing).
		bound := time.Now().Add(3 * time.Minute)
		for done.Load() < rows {
			if time.Now().After(bound) {
				t.Fatalf("waited 3 minutes for the 8 claimers to complete the %d rows; %d completed", rows, done.Load())
			}
			var n int
			if err := s.DB().QueryRowContext(ctx, count).Scan(&n); err != nil {
				t.Fatal(err)
			}
			samples++
			most = max(most, n)
			if n > limit {
				logLive(t, s)
				t.Errorf("%d live attempts of kind a; its limit is %d", n, limit)
				break
			}
			select {
			case err := <-errs:
				t.Fatal(err)
			default:
			}
		}
		cancel()
		wg.Wait()
		t.Logf("%d counts, at most %d live", samples, most)
	})
}

// A claim under limits reads the expired holders through their index,
// whatever the plan and however much history the table holds: with 50,000
// finished rows and 40 live attempts holding the places of a kind, the
// claim's generic and custom plans read no table sequentially, and the
// statement takes what the limits leave (the queue's limit of 60, less the
// 40 held: 20 rows of the other kind).
func TestClaimUnderLimitsReadsNoTableSequentially(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFinished(ctx, s, 50000); err != nil {
		t.Fatal(err)
	}
	setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 40})
	setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 60})
	pgtest.EnqueueN(t, s, 100, "a")
	if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100}); len(got) != 40 {
		t.Fatalf("claim took %d; want 40, the kind's limit", len(got))
	}
	pgtest.EnqueueN(t, s, 100, "b")
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.ClaimStatement(s), "100, '{}', 60000000, '', 'default', '{}', 0")
		if mode == "force_generic_plan" && !strings.Contains(plan, "$5") {
			t.Errorf("%s: the plan shows no parameter; it is not generic:\n%s", mode, plan)
		}
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: the claim under limits reads a table sequentially:\n%s", mode, plan)
		}
		if !strings.Contains(plan, "Index Scan using events_limit_holders_idx on events h") {
			t.Errorf("%s: the claim does not read the expired holders through their index:\n%s", mode, plan)
		}
		if !strings.Contains(strings.SplitN(plan, "\n", 2)[0], "rows=20 loops=1") {
			t.Errorf("%s: the claim did not take 20 rows:\n%s", mode, plan)
		}
	}
}

// logLive logs the live attempts of kind a with the slot each is counted
// in, and the slots' counts, to tell a failure of the limit apart.
func logLive(t *testing.T, s *lease.Store) {
	rows, err := s.DB().Query("SELECT e.id, e.generation, COALESCE(e.kind_slot, -1), (SELECT string_agg(sl.key || ': ' || sl.used || ' of ' || sl.cap, ', ') FROM " +
		lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_limit_slots") + " AS sl WHERE sl.key = e.kind_slot) FROM " + s.QualifiedTable() +
		" AS e WHERE e.kind = 'a' AND e.status = 'INPROGRESS' AND e.lease_until > now()")
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, gen, kindSlot int64
		var slots sql.NullString
		if err := rows.Scan(&id, &gen, &kindSlot, &slots); err != nil {
			t.Log(err)
			return
		}
		t.Logf("live: row %d at generation %d, kind_slot %d, slot %s", id, gen, kindSlot, slots.String)
	}
}

// A slot past a lowered limit stays held by its attempt: a raise does not
// make it free while that attempt runs. (Removing it let a limit lowered
// from 2 to 1 and raised to 2 again have 3 attempts live.)
func TestRaiseAfterLowerFindsTheSlotsHeld(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 2})
		pgtest.EnqueueN(t, s, 5, "a")
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 2 {
			t.Fatalf("claim took %d; want 2", len(got))
		}
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 2})
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10}); len(got) != 0 {
			t.Fatalf("claim after lowering to 1 and raising to 2, 2 attempts live, took %d; want 0", len(got))
		}
		limits, err := s.Limits(ctx)
		if err != nil || len(limits) != 1 || limits[0].Live != 2 {
			t.Fatalf("Limits = %+v, %v; want 2 live of 2", limits, err)
		}
	})
}

// wantCounted checks the slots' counts against the rows: for every limit,
// the attempts its slots count, less the releases not yet counted, are
// the INPROGRESS rows counted in its slots. No path that ends, takes back
// or moves an attempt may leave them apart (a count too high shrinks the
// limit for good; too low admits too many).
func wantCounted(t *testing.T, s *lease.Store, step string) {
	t.Helper()
	name := func(suffix string) string {
		return lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_"+suffix)
	}
	rows, err := s.DB().Query(`
		SELECT l.scope, l.name,
		    (SELECT COALESCE(sum(sl.used), 0) FROM ` + name("limit_slots") + ` AS sl WHERE sl.limit_id = l.id)
		    - (SELECT COALESCE(sum(r.n), 0) FROM ` + name("limit_releases") + ` AS r
		       WHERE r.key >= l.id::bigint * 100000 AND r.key < l.id::bigint * 100000 + 16),
		    (SELECT count(*) FROM ` + s.QualifiedTable() + ` AS e WHERE e.status = 'INPROGRESS'
		       AND CASE l.scope WHEN 'kind' THEN e.kind_slot ELSE e.queue_slot END
		           BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + 15)
		FROM ` + name("limits") + ` AS l ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var scope, lname string
		var counted, held int64
		if err := rows.Scan(&scope, &lname, &counted, &held); err != nil {
			t.Fatal(err)
		}
		if counted != held {
			t.Errorf("after %s: limit %s %s counts %d attempts; %d rows are counted in its slots", step, scope, lname, counted, held)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// Every path that claims, ends, takes back or moves an attempt keeps the
// slots' counts equal to the rows they count: claims, the store's own
// completions (one release per slot), a completion in the caller's
// transaction, a retry, a release, a cancel of a running attempt (the
// trigger), an expired lease taken back (its place kept), a sweep taking
// the place of another queue's expired holder, a claim ending an
// exhausted holder, and a limit lowered, raised and cleared.
func TestSlotCountsFollowEveryPath(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 3})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 40})
		pgtest.EnqueueN(t, s, 20, "a")
		pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "last-try", MaxAttempts: 1})
		claim := func(step string) []leasework.Claim {
			t.Helper()
			got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
			wantCounted(t, s, step)
			return got
		}
		c := claim("the first claim")
		if len(c) != 3 {
			t.Fatalf("first claim took %d; want 3", len(c))
		}
		write(t, s, lease.Complete(c[0].Ref()))
		write(t, s, lease.Retry(c[1].Ref(), 0, "again"))
		wantCounted(t, s, "a completion and a retry")
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteTx(ctx, tx, lease.Complete(c[2].Ref())); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wantCounted(t, s, "a completion in the caller's transaction")

		c = claim("a claim counting the releases")
		if len(c) != 3 {
			t.Fatalf("claim after three ends took %d; want 3", len(c))
		}
		write(t, s, lease.Release(c[0].Ref()))
		if _, err := s.Cancel(ctx, c[1].ID, "test"); err != nil {
			t.Fatal(err)
		}
		// The owner's next write is its acknowledged stop: the row ends
		// DISCARDED.
		if _, err := s.Write(ctx, lease.Complete(c[1].Ref())); !errors.Is(err, leasework.ErrCancelled) {
			t.Fatalf("the cancelled attempt's completion: %v; want ErrCancelled", err)
		}
		if err := leasetest.ExpireLease(ctx, s, c[2].ID); err != nil {
			t.Fatal(err)
		}
		wantCounted(t, s, "a release, a cancel and an expired lease")
		again := claim("a claim taking back the expired lease")
		if !slices.ContainsFunc(again, func(x leasework.Claim) bool { return x.ID == c[2].ID && x.Reclaimed }) {
			t.Fatalf("claim after the lease ran out = %v; want row %d taken back", again, c[2].ID)
		}
		for _, x := range again {
			write(t, s, lease.Complete(x.Ref()))
		}
		wantCounted(t, s, "completions")

		// A holder of another queue, expired: a sweep of the default queue
		// takes its kind place.
		x := pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "other", Queue: "other"})[0]
		got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "other"})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim of queue other: %v, %v", got, err)
		}
		full := claim("a claim filling the kind's limit")
		if len(full) != 2 {
			t.Fatalf("claim beside other's holder took %d; want 2", len(full))
		}
		if err := leasetest.ExpireLease(ctx, s, x.ID); err != nil {
			t.Fatal(err)
		}
		swept := claim("a sweep taking the place of other's expired holder")
		if len(swept) != 1 {
			t.Fatalf("sweep took %d; want 1, with the place of other's holder", len(swept))
		}
		if _, err := s.Write(ctx, lease.Complete(got[0].Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("other's late completion: %v; want ErrLeaseLost", err)
		}
		for _, y := range append(full, swept...) {
			write(t, s, lease.Complete(y.Ref()))
		}
		wantCounted(t, s, "the sweep's attempts completed")
		back, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "other"})
		if err != nil || len(back) != 1 || back[0].ID != x.ID {
			t.Fatalf("queue other taking back its row: %v, %v", back, err)
		}
		wantCounted(t, s, "other's row taken back, with a new place")
		write(t, s, lease.Complete(back[0].Ref()))

		// The last try, expired: the claim that ends it gives its place
		// back at its commit.
		for {
			c := claim("claims to the last try")
			last := slices.IndexFunc(c, func(x leasework.Claim) bool { return x.EventID == "last-try" })
			if last >= 0 {
				if err := leasetest.ExpireLease(ctx, s, c[last].ID); err != nil {
					t.Fatal(err)
				}
				c = slices.Delete(c, last, last+1)
			}
			for _, y := range c {
				write(t, s, lease.Complete(y.Ref()))
			}
			if last >= 0 || len(c) == 0 {
				break
			}
		}
		claim("a claim ending the last try FAILED")
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		c = claim("a claim under the lowered limit")
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 5})
		c = append(c, claim("a claim under the raised limit")...)
		for _, y := range c {
			write(t, s, lease.Complete(y.Ref()))
		}
		wantCounted(t, s, "a lowering and a raise")
		if n, err := s.Limits(ctx); err != nil || len(n) != 2 || n[0].Live != 0 || n[1].Live != 0 {
			t.Errorf("limits at the end: %+v, %v; want nothing live", n, err)
		}
	})
}

// A completion taking turns hands the places its rows held on to the next
// due rows of the queue, claimed in the same statement: the slots' counts
// do not move, no release is written for them, and a place in a slot past
// its share (after a lowering) is given back instead. A paused queue, or
// a kind the worker does not claim, takes none.
func TestCompletionHandsItsPlacesOn(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 2})
		ids := pgtest.EnqueueN(t, s, 8, "a")
		pgtest.Enqueue(t, s, lease.Event{Kind: "b", EventID: "free-kind"})
		first, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2, Kinds: []string{"a"}})
		if len(first) != 2 {
			t.Fatalf("claim took %d; want 2", len(first))
		}
		completeTaking := func(req lease.ClaimRequest, cs ...leasework.Claim) []leasework.Claim {
			t.Helper()
			ws := make([]lease.Write, len(cs))
			for i, c := range cs {
				ws[i] = lease.Complete(c.Ref())
			}
			if req.Lease == 0 {
				req.Lease = time.Minute
			}
			res, took, err := s.WriteManyTakingTurns(ctx, req, ws...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Verdict != lease.VerdictAccepted {
					t.Fatalf("completion %v: %v", r.Verdict, r.Err)
				}
			}
			return took
		}
		handed := completeTaking(lease.ClaimRequest{Limit: 5}, first...)
		if len(handed) != 2 || handed[0].ID != ids[2].ID || handed[1].ID != ids[3].ID {
			t.Fatalf("completion handed its places to %v; want rows %d and %d, the next due of kind a", handed, ids[2].ID, ids[3].ID)
		}
		wantCounted(t, s, "a completion handing its places on")
		var releases int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+lease.QuoteIdent(s.Schema())+"."+
			lease.QuoteIdent(s.Table()+"_limit_releases")).Scan(&releases); err != nil {
			t.Fatal(err)
		}
		if releases != 0 {
			t.Errorf("%d releases written; want none, every place was handed on", releases)
		}
		if got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, Kinds: []string{"a"}}); len(got) != 0 {
			t.Fatalf("claim beside the rows handed on took %v; want nothing (the limit is full)", got)
		}

		// A kind the worker does not claim, or a paused queue: nothing is
		// handed on, and the places are given back.
		// (Kind b is over no limit: a claim takes it, not the completion.)
		if none := completeTaking(lease.ClaimRequest{Limit: 5, Kinds: []string{"b"}}, handed[0]); len(none) != 0 {
			t.Fatalf("completion for kinds [b] took %v; want nothing", none)
		}
		wantCounted(t, s, "a completion for another kind")
		if _, err := s.PauseQueue(ctx, lease.DefaultQueue); err != nil {
			t.Fatal(err)
		}
		if got := completeTaking(lease.ClaimRequest{Limit: 5}, handed[1]); len(got) != 0 {
			t.Fatalf("completion in a paused queue took %v; want nothing", got)
		}
		if _, err := s.ResumeQueue(ctx, lease.DefaultQueue); err != nil {
			t.Fatal(err)
		}
		wantCounted(t, s, "a completion in a paused queue")

		// After a lowering, a place past its slot's share is given back.
		two, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, Kinds: []string{"a"}})
		if len(two) != 2 {
			t.Fatalf("claim after the places were given back took %d; want 2", len(two))
		}
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		took := completeTaking(lease.ClaimRequest{Limit: 5}, two...)
		if len(took) > 1 {
			t.Fatalf("completion under a limit lowered to 1 handed on %d places; want at most 1", len(took))
		}
		wantCounted(t, s, "a completion after a lowering")
		for _, c := range took {
			write(t, s, lease.Complete(c.Ref()))
		}
		wantCounted(t, s, "the end")
	})
}

// A sweep takes the place of an expired holder only from a slot within
// its share: after a lowering, the place of a holder in a slot the lower
// limit gives nothing is not taken (the soak's history caught a sweep
// taking it, with 2 attempts live under a limit of 1).
func TestSweepTakesNoPlacePastALoweredShare(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 2})
		pgtest.Enqueue(t, s, lease.Event{Kind: "a", EventID: "o-1", Queue: "other"}, lease.Event{Kind: "a", EventID: "o-2", Queue: "other"})
		held, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute, Queue: "other"})
		if err != nil || len(held) != 2 {
			t.Fatalf("claim of queue other: %v, %v; want 2", held, err)
		}
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		for _, c := range held {
			if err := leasetest.ExpireLease(ctx, s, c.ID); err != nil {
				t.Fatal(err)
			}
		}
		pgtest.EnqueueN(t, s, 3, "a")
		got, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10})
		if len(got) != 1 {
			t.Fatalf("sweep under a limit lowered to 1 took %d places of expired holders; want 1", len(got))
		}
		wantCounted(t, s, "the sweep")
	})
}
