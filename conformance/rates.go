package conformance

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties of rate limits (lease.RateLimit): at most Max attempt
// starts of a kind, of a queue, or of a partition, in any window of Per,
// across every claimer. An attempt starts when a claim takes its row (a first attempt,
// a retry, an expired lease taken back), at the claim statement's time,
// and takes its event's Cost in starts.
func rateProperties() []property {
	return []property{
		{"RateLimitHoldsInEveryWindowUnderConcurrentClaims", rateLimitHoldsInEveryWindow},
		{"HeldBackRowsRunOnceTheWindowMovesOn", heldBackRowsRunOnceTheWindowMovesOn},
		{"RateLimitComposesWithKeyOrder", rateLimitComposesWithKeyOrder},
		{"RetriesAndTakeBacksTakeStarts", retriesAndTakeBacksTakeStarts},
		{"PartitionRateLimitHoldsInEveryWindow", partitionRateLimitHoldsInEveryWindow},
	}
}

// setRateLimit declares l through the store under test.
func (e *env) setRateLimit(l lease.RateLimit) {
	e.t.Helper()
	if _, _, err := e.store.SetRateLimit(e.ctx, l, e.t.Name()); err != nil {
		e.t.Fatalf("set rate limit %+v: %v", l, err)
	}
}

// ageStarts is the rate limits' fixture: it moves every start they count
// d into the past, as if d had passed.
func (e *env) ageStarts(d time.Duration) {
	e.t.Helper()
	if err := leasetest.AgeRateStarts(e.ctx, e.fix, d); err != nil {
		e.t.Fatal(err)
	}
}

// costOf is the cost of the i-th event of a rate property's run: 1 most
// often, 2, 3 or 4 now and then.
func costOf(i int) int {
	return 1 + btoi(i%4 == 1) + 2*btoi(i%6 == 3)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startLog records the starts of claims under rate limits, as the
// claimers see them: each at its claim statement's time, which is its
// lease's end less the lease asked for (the claim gives lease_until =
// statement_timestamp() + lease), with its event's cost. check then looks
// at every window of the period.
type startLog struct {
	mu     sync.Mutex
	per    time.Duration
	limit  map[string]int // "kind a", "queue mail" -> Max
	cost   map[string]int // event id -> cost
	of     func(leasework.Claim) []string
	starts map[string][]rateStart
}

// rateStart is one claim's start under a rate limit.
type rateStart struct {
	at      time.Time
	cost    int
	eventID string
	gen     int64
}

// newStartLog is a log of the starts under limits (Max per per) of events.
func newStartLog(per time.Duration, limits map[string]int, events []lease.Event) *startLog {
	l := &startLog{per: per, limit: limits, cost: map[string]int{}, of: limitsOf, starts: map[string][]rateStart{}}
	for _, ev := range events {
		l.cost[ev.EventID] = max(ev.Cost, 1)
	}
	return l
}

// add records claims, each made with a lease of leaseFor.
func (l *startLog) add(claims []leasework.Claim, leaseFor time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range claims {
		for _, name := range l.of(c) {
			if _, ok := l.limit[name]; ok {
				l.starts[name] = append(l.starts[name], rateStart{at: c.LeaseUntil.Add(-leaseFor), cost: l.cost[c.EventID], eventID: c.EventID, gen: c.Generation})
			}
		}
	}
}

// check fails the test for every window of the period that holds more
// starts of a limit than its Max, and logs the fullest window of each.
// The windows checked are those that end with a start, (at - Per, at], as
// the store counts them: every window of length Per holds no more starts
// than the one that ends with its last start.
func (l *startLog) check(e *env) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var over []string
	for _, name := range slices.Sorted(maps.Keys(l.limit)) {
		limit := l.limit[name]
		s := slices.Clone(l.starts[name])
		slices.SortStableFunc(s, func(a, b rateStart) int { return a.at.Compare(b.at) })
		most, claims, units := 0, len(s), 0
		first, sum := 0, 0 // the window's first start, and its starts
		for i := 0; i < len(s); {
			last := i // the starts at s[i].at end the window
			for ; last < len(s) && s[last].at.Equal(s[i].at); last++ {
				sum += s[last].cost
				units += s[last].cost
			}
			for !s[first].at.After(s[i].at.Add(-l.per)) {
				sum -= s[first].cost
				first++
			}
			most = max(most, sum)
			if sum > limit && len(over) < 10 {
				var in []string
				for _, x := range s[first:last] {
					in = append(in, fmt.Sprintf("%s generation %d cost %d at %s", x.eventID, x.gen, x.cost, x.at.UTC().Format("15:04:05.000000")))
				}
				over = append(over, fmt.Sprintf("%s: %d starts in the window of %v that ends at %s, above its Max of %d: %s",
					name, sum, l.per, s[i].at.UTC().Format("15:04:05.000000"), limit, strings.Join(in, ", ")))
			}
			i = last
		}
		e.t.Logf("%s: %d claims, %d starts; the fullest window of %v held %d of its Max of %d", name, claims, units, l.per, most, limit)
	}
	if len(over) > 0 {
		e.t.Errorf("more starts in a window than a rate limit allows:\n%s", strings.Join(over, "\n"))
	}
}

// Eight claimers, five of the default queue (one of them claiming kind a
// only) and three of queue mail, claim batches of one to four rows through
// the driver under test, and complete, retry, release or abandon each
// claim at random (seeded; the seed is logged), as in
// LimitHoldsUnderConcurrentClaims: an abandoned claim's lease is expired
// by the fixture at once, and a later claim takes the row back. Kind a is
// rate-limited to 10 starts in any 300ms, in every queue, queue mail to 12
// of every kind; kind b of the default queue is not limited. A quarter of
// the events cost 2 to 4 starts. It must hold that no window of 300ms,
// wherever it begins, holds more starts of kind a, or of queue mail, than
// its limit, by the claims' own times (their leases' ends less the lease),
// each start counted at its event's cost, whether it is a first attempt,
// a retry or a lease taken back; and every row ends DONE: the limits hold
// back, they never stall. The window is short and real: the run lasts a
// few windows' worth of the starts it makes.
func rateLimitHoldsInEveryWindow(e *env) {
	const per = 300 * time.Millisecond
	const maxA, maxMail, claimers = 10, 12, 8
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeKind, Name: "a", Max: maxA, Per: per})
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeQueue, Name: "mail", Max: maxMail, Per: per})
	var events []lease.Event
	add := func(n int, kind, queue string) {
		for i := range n {
			events = append(events, lease.Event{Kind: kind, Queue: queueArg(queue), MaxAttempts: 100, Cost: costOf(i),
				EventID: fmt.Sprintf("%s-%s-%03d", queue, kind, i)})
		}
	}
	add(24, "a", lease.DefaultQueue)
	add(30, "b", lease.DefaultQueue)
	add(8, "a", "mail")
	add(24, "c", "mail")
	e.enqueue(events...)
	log := newStartLog(per, map[string]int{"kind a": maxA, "queue mail": maxMail}, events)
	e.claimUnderRates(claimers, int64(len(events)), log, func(w int) lease.ClaimRequest {
		req := lease.ClaimRequest{}
		switch {
		case w >= 5:
			req.Queue = "mail"
		case w == 4:
			req.Kinds = []string{"a"}
		}
		return req
	})
}

// claimUnderRates runs claimers concurrent claimers of total events, each
// claiming as req(its number) asks (with the test lease and its own
// worker name), in batches of one to four rows, recording every claim in
// log and ending it at random (seeded; the seed is logged), as in
// LimitHoldsUnderConcurrentClaims: an abandoned claim's lease is expired
// by the fixture at once, and a later claim takes the row back. A claimer
// that finds nothing polls again 2ms later. Then it checks every window of
// log, and that every event ended DONE.
func (e *env) claimUnderRates(claimers int, total int64, log *startLog, req func(w int) lease.ClaimRequest) {
	seed := rand.Uint64()
	e.t.Logf("seed %d", seed)
	tally := newLiveTally(map[string]int{}) // no concurrency limit: endAtRandom's bookkeeping only
	run, stop := context.WithCancel(e.ctx)
	defer stop()
	var done atomic.Int64
	errs := make(chan error, claimers)
	fail := func(err error) { errs <- err; stop() }
	var wg sync.WaitGroup
	for w := range claimers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		req := req(w)
		req.Lease, req.Worker = testLease, fmt.Sprintf("claimer-%d", w)
		wg.Go(func() {
			for n := 0; done.Load() < total && run.Err() == nil; n++ {
				req.Limit = 1 + (w+n)%4
				got, err := e.store.Claim(e.ctx, req)
				if err != nil {
					fail(fmt.Errorf("claimer %d: claim: %w", w, err))
					return
				}
				if len(got) == 0 {
					// The rows left are held by others, or held back
					// until the window moves on.
					select {
					case <-run.Done():
					case <-time.After(2 * time.Millisecond):
					}
					continue
				}
				log.add(got, testLease)
				for _, c := range got {
					if err := e.endAtRandom(rng, c, tally, &done); err != nil {
						fail(fmt.Errorf("claimer %d: %w", w, err))
						return
					}
				}
			}
		})
	}
	e.claimersDone(&wg, nil, tally, errs, &done, total)
	log.check(e)
	e.wantAllDone(total)
}

// Kind a is rate-limited to 6 starts an hour, queue mail to 5 (its events
// of kind m); their events cost 1 to 6, the first six or seven 1. Round
// after round, three claimers of the default queue and two of mail, with
// Limits of 1 to 3, claim through the driver under test until each found
// nothing twice, completing every claim at once; then claims of one row of
// each queue alone take what they left, until one takes nothing. It must
// hold that, in each round, the starts of kind a and of queue mail are
// within their limits; the limit holds back no row that fits: the first
// of its rows not yet claimed, in enqueue order (the claim's), costs more
// than the starts left (a claim takes rows while their costs fit, and a
// claim of one row takes one that costs the whole limit); the rows held
// back are READY, never lost. Half a period on (the fixture ages the
// starts), a claim of each queue still takes nothing; a period on, the
// next round begins. Every event is claimed once and ends DONE.
func heldBackRowsRunOnceTheWindowMovesOn(e *env) {
	const per = time.Hour
	const maxA, maxMail = 6, 5
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeKind, Name: "a", Max: maxA, Per: per})
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeQueue, Name: "mail", Max: maxMail, Per: per})
	type limited struct {
		name, queue string
		max         int
		costs       []int
	}
	limits := []limited{
		{"kind a", lease.DefaultQueue, maxA, []int{1, 1, 1, 1, 1, 1, 1, 2, 3, 6, 1, 2, 4, 1, 5, 2, 1, 3}},
		{"queue mail", "mail", maxMail, []int{1, 1, 1, 1, 1, 1, 5, 2, 3, 1, 4, 1, 2}},
	}
	var events []lease.Event
	order := map[string][]lease.Event{} // per limit, in enqueue order
	for _, l := range limits {
		kind := "a"
		if l.queue == "mail" {
			kind = "m"
		}
		for i, cost := range l.costs {
			ev := lease.Event{Kind: kind, Queue: queueArg(l.queue), Cost: cost, EventID: fmt.Sprintf("%s-%02d", kind, i)}
			events = append(events, ev)
			order[l.name] = append(order[l.name], ev)
		}
	}
	enqueued := e.enqueue(events...)
	ids := map[string]int64{}
	for i, ev := range events {
		ids[ev.EventID] = enqueued[i].ID
	}
	total := int64(len(events))

	claimed := map[string]int{} // event id -> claims of it
	var mu sync.Mutex
	claimOf := func(queue string, limit int) ([]leasework.Claim, error) {
		got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: limit, Lease: testLease, Queue: queueArg(queue),
			Worker: fmt.Sprintf("%s-%d", queue, limit)})
		if err != nil {
			return nil, fmt.Errorf("claim of queue %s, Limit %d: %w", queue, limit, err)
		}
		for _, c := range got {
			if err := e.write(lease.Complete(c.Ref())); err != nil {
				return nil, fmt.Errorf("complete %s: %w", c.EventID, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range got {
			claimed[c.EventID]++
		}
		return got, nil
	}
	mustClaim := func(queue string, limit int) []leasework.Claim {
		e.t.Helper()
		got, err := claimOf(queue, limit)
		if err != nil {
			e.t.Fatal(err)
		}
		return got
	}
	const maxRounds = 20
	for round := 1; ; round++ {
		if round > maxRounds {
			e.t.Fatalf("%d rounds and rows are left: a rate limit holds back rows whose window moved on", maxRounds)
		}
		before := maps.Clone(claimed)
		var wg sync.WaitGroup
		errs := make(chan error, 5)
		for w, c := range []struct {
			queue string
			limit int
		}{{lease.DefaultQueue, 1}, {lease.DefaultQueue, 2}, {lease.DefaultQueue, 3}, {"mail", 1}, {"mail", 2}} {
			wg.Go(func() {
				for empty := 0; empty < 2; {
					got, err := claimOf(c.queue, c.limit)
					if err != nil {
						errs <- fmt.Errorf("round %d, claimer %d: %w", round, w, err)
						return
					}
					if len(got) == 0 {
						empty++
					} else {
						empty = 0
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		for _, l := range limits {
			for took := true; took; {
				took = len(mustClaim(l.queue, 1)) > 0
			}
		}
		left := false
		for _, l := range limits {
			units := 0
			var held []lease.Event
			for _, ev := range order[l.name] {
				switch {
				case claimed[ev.EventID] > before[ev.EventID]:
					units += ev.Cost
				case claimed[ev.EventID] == 0:
					held = append(held, ev)
				}
			}
			if units > l.max {
				e.t.Fatalf("round %d: %d starts of %s in one window; its limit is %d", round, units, l.name, l.max)
			}
			if len(held) == 0 {
				continue
			}
			left = true
			if held[0].Cost <= l.max-units {
				e.t.Fatalf("round %d: %s started %d of its %d, and held back %s, which costs %d: a row that fits is held back",
					round, l.name, units, l.max, held[0].EventID, held[0].Cost)
			}
			for _, ev := range held {
				e.wantState(ids[ev.EventID], leasework.StatusReady, 0)
			}
		}
		if !left {
			e.t.Logf("every row ran, in %d rounds", round)
			break
		}
		e.ageStarts(per / 2) // fixture: half a period passes
		for _, l := range limits {
			if got := mustClaim(l.queue, 100); len(got) != 0 {
				e.t.Fatalf("round %d: a claim of queue %s half a period on took %s; want nothing: the window has not moved on", round, l.queue, eventIDs(got))
			}
		}
		e.ageStarts(per/2 + time.Second) // fixture: the period has passed
	}
	for _, ev := range events {
		if n := claimed[ev.EventID]; n != 1 {
			e.t.Errorf("%s was claimed %d times; want once", ev.EventID, n)
		}
	}
	e.wantAllDone(total)
}

// Kind a is rate-limited to 8 starts in any 250ms; kind b is not. Six keys
// of kind a and two of kind b have four events each, and six keyless
// events of kind a come beside them; the events of kind a cost 1 or 2.
// Four claimers claim batches of one to three, and complete (half of the
// time through Store.WriteManyTakingTurns, asking for turns), retry at
// once, or abandon (the lease then expired by the fixture) at random,
// seeded. It must hold that: a key never has two events claimed and
// unfinished at once; each key's events are first claimed in enqueue
// order; no window of 250ms holds more starts of kind a than its limit, by
// the claims' own times; a completion taking turns never hands on an
// event of kind a (it becomes READY, and a claim takes it under the
// limit); and every event ends DONE.
//
// Then, alone, under a limit of 2 an hour on kind t: of a key's three
// events, a claim takes the first only (the second waits for its key);
// its completion taking turns hands nothing on, and a claim takes the
// second, the window's last start; the second's completion hands nothing
// on, and the third, READY, waits for the window: a claim takes nothing,
// half a period on (the fixture ages the starts) still nothing, and a
// period on, the third.
func rateLimitComposesWithKeyOrder(e *env) {
	const per = 250 * time.Millisecond
	const maxA, claimers = 8, 4
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeKind, Name: "a", Max: maxA, Per: per})
	var events []lease.Event
	for i := range 4 {
		for k := range 8 {
			kind := "a"
			if k >= 6 {
				kind = "b"
			}
			events = append(events, lease.Event{Kind: kind, Key: fmt.Sprintf("key-%d", k), MaxAttempts: 100, Cost: 1 + (i+k)%2,
				EventID: fmt.Sprintf("%s/key-%d/%d", kind, k, i)})
		}
		for j := range 2 {
			n := 2*i + j
			if n < 6 {
				events = append(events, lease.Event{Kind: "a", MaxAttempts: 100, Cost: 1 + n%2, EventID: fmt.Sprintf("a/-/%d", n)})
			}
		}
	}
	e.enqueue(events...)
	total := int64(len(events))
	log := newStartLog(per, map[string]int{"kind a": maxA}, events)
	e.runKeyOrder(keyOrderRun{total: total, claimers: claimers, tally: newLiveTally(map[string]int{}),
		started: func(got []leasework.Claim) { log.add(got, testLease) },
		turns: func(c leasework.Claim, turns []leasework.Claim) string {
			for _, x := range turns {
				if x.Kind == "a" {
					return fmt.Sprintf("the completion of %s handed on %s, of kind a, which a rate limit covers", c.EventID, x.EventID)
				}
			}
			return ""
		}})
	log.check(e)
	e.wantAllDone(total)

	// Alone: the key's turn, then the window.
	const perT = time.Hour
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeKind, Name: "t", Max: 2, Per: perT})
	evs := e.enqueue(
		lease.Event{Kind: "t", Key: "t", EventID: "t-1"},
		lease.Event{Kind: "t", Key: "t", EventID: "t-2"},
		lease.Event{Kind: "t", Key: "t", EventID: "t-3"})
	completeTaking := func(c leasework.Claim) {
		e.t.Helper()
		res, turns, err := e.store.WriteManyTakingTurns(e.ctx, lease.ClaimRequest{Limit: 10, Lease: testLease}, lease.Complete(c.Ref()))
		if err = answered(res, err); err == nil {
			err = firstErr(res)
		}
		wantOK(e.t, "completion of "+c.EventID+" taking turns", err)
		if len(turns) != 0 {
			e.t.Fatalf("the completion of %s took turns %s; want none (a rate limit covers kind t)", c.EventID, eventIDs(turns))
		}
	}
	first := e.claim(10)
	if len(first) != 1 || first[0].EventID != "t-1" {
		e.t.Fatalf("claim of key t = %s; want t-1 alone (t-2 waits for its key)", eventIDs(first))
	}
	completeTaking(first[0])
	e.wantState(evs[1].ID, leasework.StatusReady, 0)
	second := e.claim(10)
	if len(second) != 1 || second[0].EventID != "t-2" {
		e.t.Fatalf("claim after t-1 completed = %s; want t-2, the window's second start of 2", eventIDs(second))
	}
	completeTaking(second[0])
	e.wantState(evs[2].ID, leasework.StatusReady, 0)
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim after t-2 completed = %s; want nothing: t-3 has its key's turn, and waits for the window", eventIDs(got))
	}
	e.ageStarts(perT / 2) // fixture: half a period passes
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim half a period on = %s; want nothing: the window has not moved on", eventIDs(got))
	}
	e.ageStarts(perT/2 + time.Second) // fixture: the period has passed
	third := e.claim(10)
	if len(third) != 1 || third[0].EventID != "t-3" {
		e.t.Fatalf("claim a period on = %s; want t-3", eventIDs(third))
	}
	wantOK(e.t, "complete t-3", e.write(lease.Complete(third[0].Ref())))
}

// Kind a is rate-limited to 4 starts an hour; x-2 costs 2, the others 1.
// A claim takes x-1, x-2 and x-3 (4 starts); x-1 is retried at once: its
// retry waits for the window, as do x-4 to x-6 (a claim takes nothing, and
// half a period on, the fixture aging the starts, nothing either). A
// period on, a claim takes x-4, x-5, x-6 and x-1, the retry's start the
// window's fourth. The leases of x-2 and x-3 are expired by the fixture
// (their owners are gone): taking them back takes starts, which the full
// window does not have, and a claim takes nothing; a period on, it takes
// both back at their next generation (3 starts: x-2's cost is 2), and x-4
// and x-5, ending at once and released, give none back: a claim then
// takes x-5, the one start left, and no more.
func retriesAndTakeBacksTakeStarts(e *env) {
	const per = time.Hour
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopeKind, Name: "a", Max: 4, Per: per})
	var events []lease.Event
	for i := 1; i <= 6; i++ {
		cost := 1
		if i == 2 {
			cost = 2
		}
		events = append(events, lease.Event{Kind: "a", Cost: cost, EventID: fmt.Sprintf("x-%d", i)})
	}
	evs := e.enqueue(events...)
	want := func(what string, got []leasework.Claim, names ...string) map[string]leasework.Claim {
		e.t.Helper()
		byName := map[string]leasework.Claim{}
		var gotNames []string
		for _, c := range got {
			byName[c.EventID] = c
			gotNames = append(gotNames, c.EventID)
		}
		slices.Sort(gotNames)
		slices.Sort(names)
		if !slices.Equal(gotNames, names) {
			e.t.Fatalf("%s took %v; want %v", what, gotNames, names)
		}
		return byName
	}
	halfThenWhole := func(what string) {
		e.t.Helper()
		want(what, e.claim(10))
		e.ageStarts(per / 2) // fixture: half a period passes
		want(what+", half a period on", e.claim(10))
		e.ageStarts(per/2 + time.Second) // fixture: the period has passed
	}

	first := want("the first claim (4 starts of 4)", e.claim(10), "x-1", "x-2", "x-3")
	x1 := first["x-1"]
	wantOK(e.t, "retry x-1 at once", e.write(lease.Retry(x1.Ref(), 0, "again")))
	e.wantState(evs[0].ID, leasework.StatusReady, e.gen(1))
	halfThenWhole("a claim after x-1's retry, the window full")
	second := want("a claim a period on", e.claim(10), "x-4", "x-5", "x-6", "x-1")
	if c := second["x-1"]; c.Attempt != 2 || c.Generation != e.gen(2) {
		e.t.Fatalf("x-1 claimed again at attempt %d generation %d; want attempt 2, generation %d", c.Attempt, c.Generation, e.gen(2))
	}
	for _, id := range []int64{evs[1].ID, evs[2].ID} {
		e.expire(id) // fixture: the owners of x-2 and x-3 are gone, and their leases ran out
	}
	halfThenWhole("a claim after the leases of x-2 and x-3 ran out, the window full")
	e.wantState(evs[1].ID, leasework.StatusInProgress, e.gen(1))
	back := want("a claim a period on", e.claim(10), "x-2", "x-3")
	for _, c := range back {
		if !c.Reclaimed || c.Generation != e.gen(2) {
			e.t.Fatalf("%s taken back: reclaimed %v, generation %d; want reclaimed at generation %d", c.EventID, c.Reclaimed, c.Generation, e.gen(2))
		}
	}
	x4, x5, x6 := second["x-4"], second["x-5"], second["x-6"]
	wantOK(e.t, "complete x-4", e.write(lease.Complete(x4.Ref())))
	wantOK(e.t, "release x-5", e.write(lease.Release(x5.Ref())))
	last := want("a claim after x-4 ended and x-5 was released (3 starts of 4 in the window)", e.claim(10), "x-5")
	wantOK(e.t, "retry x-6 at once", e.write(lease.Retry(x6.Ref(), 0, "again")))
	want("a claim after x-6's retry, the window full", e.claim(10))
	for _, c := range []leasework.Claim{back["x-2"], back["x-3"], second["x-1"], last["x-5"]} {
		wantOK(e.t, "complete "+c.EventID, e.write(lease.Complete(c.Ref())))
	}
}

// Eight claimers, five of the default queue and three of queue mail, claim
// batches of one to four rows through the driver under test, and
// complete, retry, release or abandon each claim at random (seeded; the
// seed is logged), as in RateLimitHoldsInEveryWindowUnderConcurrentClaims,
// over events of five partitions in both queues and events of none: a
// default partition rate limit of 3 starts in any 300ms, partition acme's
// own of 5, a quarter of the events costing 2 to 4 starts. A partition's
// rows past its window's room are set aside, and come back when its
// oldest start leaves the window (the claimers poll: they take no
// notifications). It must hold that no window of 300ms, wherever it
// begins, holds more starts of a partition than its limit, by the claims'
// own times, each start counted at its event's cost, a first attempt, a
// retry or a lease taken back; the rows of no partition are held by
// none; and every row ends DONE: the rows set aside all come back.
func partitionRateLimitHoldsInEveryWindow(e *env) {
	const per = 300 * time.Millisecond
	const defaultMax, acmeMax, claimers = 3, 5, 8
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopePartition, Name: "", Max: defaultMax, Per: per})
	e.setRateLimit(lease.RateLimit{Scope: lease.ScopePartition, Name: "acme", Max: acmeMax, Per: per})
	parts := []string{"acme", "p1", "p2", "p3", "p4"}
	var events []lease.Event
	limits := map[string]int{}
	for _, p := range parts {
		limits["partition "+p] = defaultMax
		if p == "acme" {
			limits["partition "+p] = acmeMax
		}
		for i := range 12 {
			queue := lease.DefaultQueue
			if i%3 == 2 {
				queue = "mail"
			}
			ev := partitionEvent(p, queue, i)
			ev.Cost = min(costOf(i), defaultMax) // within every partition's Max
			events = append(events, ev)
		}
	}
	for i := range 16 {
		events = append(events, partitionEvent("", []string{lease.DefaultQueue, "mail"}[i%2], i))
	}
	e.enqueue(events...)
	log := newStartLog(per, limits, events)
	log.of = func(c leasework.Claim) []string {
		if p := partitionOf(c.EventID); p != "" {
			return []string{"partition " + p}
		}
		return nil
	}
	e.claimUnderRates(claimers, int64(len(events)), log, func(w int) lease.ClaimRequest {
		if w >= 5 {
			return lease.ClaimRequest{Queue: "mail"}
		}
		return lease.ClaimRequest{}
	})
}
