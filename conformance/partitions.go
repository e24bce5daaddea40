package conformance

import (
	"cmp"
	"context"
	"errors"
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

// The properties of concurrency limits per partition (lease.Limit of
// lease.ScopePartition, lease.Event.Partition): at most Max live attempts
// of each partition's events, its own Max or the default, across every
// claimer and queue; the rows a full partition holds back set aside and
// none left behind.
func partitionProperties() []property {
	return []property{
		{"PartitionLimitHoldsUnderConcurrentClaims", partitionLimitHoldsUnderConcurrentClaims},
		{"KilledPartitionHolderFreesItsPlaceAtLeaseEnd", killedPartitionHolderFreesItsPlace},
		{"PausedPartitionHolderIsRefusedAfterItsPlaceIsReused", pausedPartitionHolderIsRefused},
		{"PartitionLimitComposesWithKeyOrder", partitionLimitComposesWithKeyOrder},
		{"SetAsideRowsAllRunOncePlacesFree", setAsideRowsAllRun},
	}
}

// setPartitionLimit declares the limit of partition p (empty: the
// default of every partition) through the store under test.
func (e *env) setPartitionLimit(p string, max int) {
	e.t.Helper()
	e.setLimit(lease.Limit{Scope: lease.ScopePartition, Name: p, Max: max})
}

// partitionEvent is event i of partition p (none when p is empty) in
// queue (empty: the default), with an event id that names both:
// "p/queue-i", "-" for no partition.
func partitionEvent(p, queue string, i int) lease.Event {
	name := cmpOrDash(p)
	return lease.Event{Kind: "k", Partition: p, Queue: queueArg(cmp.Or(queue, lease.DefaultQueue)), MaxAttempts: 100,
		EventID: fmt.Sprintf("%s/%s-%03d", name, cmp.Or(queue, lease.DefaultQueue), i)}
}

// partitionOf is the partition an event id of partitionEvent (or of any
// id "p/...") names: empty for "-".
func partitionOf(eventID string) string {
	p, _, _ := strings.Cut(eventID, "/")
	if p == "-" {
		return ""
	}
	return p
}

// byPartition counts claims per partition, by their event ids.
func byPartition(claims []leasework.Claim) map[string]int {
	n := map[string]int{}
	for _, c := range claims {
		n[partitionOf(c.EventID)]++
	}
	return n
}

func cmpOrDash(s string) string { return cmp.Or(s, "-") }

// claimIn claims up to limit rows of queue (empty: the default) through
// the store under test, as a sweep (no floors) with the suite's lease.
func (e *env) claimIn(queue string, limit int) []leasework.Claim {
	e.t.Helper()
	got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: limit, Lease: testLease, Queue: queue, Worker: e.t.Name()})
	if err != nil {
		e.t.Fatalf("claim of queue %q: %v", queue, err)
	}
	return got
}

// placeClaims bounds the claims in a row it may take for a place freed
// to go to a row its partition set aside: a claim takes such a row once
// it sees the place given back (a sweep that takes an expired holder's
// place gives it back for the claims after it), or one claim brings the
// row back READY and a later one takes it.
const placeClaims = 3

// claimRounds makes placeClaims claims of queue (Limit 100) and returns
// every claim they made.
func (e *env) claimRounds(queue string) []leasework.Claim {
	e.t.Helper()
	var all []leasework.Claim
	for range placeClaims {
		all = append(all, e.claimIn(queue, 100)...)
	}
	return all
}

// wantRounds makes placeClaims claims of queue and fails unless they took
// exactly the rows of ids, in any order; what is the step, for messages.
func (e *env) wantRounds(what, queue string, ids ...int64) []leasework.Claim {
	e.t.Helper()
	got := e.claimRounds(queue)
	gotIDs := make([]int64, len(got))
	for i, c := range got {
		gotIDs[i] = c.ID
	}
	slices.Sort(gotIDs)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(gotIDs, want) {
		e.t.Fatalf("%s: %d claims of queue %q took %s (rows %v); want rows %v", what, placeClaims, cmp.Or(queue, lease.DefaultQueue), eventIDs(got), gotIDs, want)
	}
	return got
}

// wantOneOfRounds makes placeClaims claims of queue and fails unless they
// took exactly one row, of a or b (a partition's rows run in no order
// among themselves); it returns its claim and the other row's id.
func (e *env) wantOneOfRounds(what, queue string, a, b int64) ([]leasework.Claim, int64) {
	e.t.Helper()
	got := e.claimRounds(queue)
	if len(got) != 1 || (got[0].ID != a && got[0].ID != b) {
		e.t.Fatalf("%s: %d claims of queue %q took %s; want one of rows %d and %d", what, placeClaims, cmp.Or(queue, lease.DefaultQueue), eventIDs(got), a, b)
	}
	if got[0].ID == a {
		return got, b
	}
	return got, a
}

// wantSetAside checks that each row of ids is set aside: WAITING, keyless
// (a claim moved it out of the READY rows, and no claim takes it).
func (e *env) wantSetAside(what string, ids ...int64) {
	e.t.Helper()
	for _, id := range ids {
		if r := e.row(id); r.Status != leasework.StatusWaiting || r.Key != "" {
			e.t.Fatalf("%s: row %d (%s) is %s; want it set aside (WAITING)", what, id, r.EventID, r.Status)
		}
	}
}

// partitionsLive starts a reader of the live attempts per partition, in
// one statement (one snapshot) a count: one count for each partition of
// named, under its own limit, and the most of any other partition's,
// under the default.
func (e *env) partitionsLive(named map[string]int, defaultMax int) *liveReader {
	names := slices.Sorted(maps.Keys(named))
	var cols, others []string
	var args []any
	var labels []string
	var limits []int
	for i, p := range names {
		cols = append(cols, fmt.Sprintf("COALESCE(max(n) FILTER (WHERE p = $%d), 0)", i+1))
		others = append(others, fmt.Sprintf("p <> $%d", i+1))
		args = append(args, p)
		labels, limits = append(labels, "partition "+p), append(limits, named[p])
	}
	other := "true"
	if len(others) > 0 {
		other = strings.Join(others, " AND ")
	}
	cols = append(cols, "COALESCE(max(n) FILTER (WHERE "+other+"), 0)")
	labels, limits = append(labels, "a partition under the default"), append(limits, defaultMax)
	return e.readLive(`
SELECT `+strings.Join(cols, ", ")+`
FROM (SELECT partition_key AS p, count(*) AS n FROM `+e.fix.QualifiedTable()+`
      WHERE status = 'INPROGRESS' AND lease_until > now() AND partition_key IS NOT NULL
      GROUP BY partition_key) AS x`, args, labels, limits)
}

// partitionTally is a liveTally of the claims per partition, each of
// partitions under its limit in limits, or the default.
func partitionTally(partitions []string, limits map[string]int, defaultMax int) *liveTally {
	m := map[string]int{}
	for _, p := range partitions {
		m["partition "+p] = cmp.Or(limits[p], defaultMax)
	}
	t := newLiveTally(m)
	t.of = func(c leasework.Claim) []string {
		if p := partitionOf(c.EventID); p != "" {
			return []string{"partition " + p}
		}
		return nil
	}
	return t
}

// Eight claimers, five of the default queue and three of queue mail, claim
// batches of one to four rows through the driver under test, and
// complete, retry, release or abandon each claim at random (seeded; the
// seed is logged), as in LimitHoldsUnderConcurrentClaims, over events of
// six partitions in both queues, and events of none: a default limit of 2
// for every partition, partition acme's own of 3 and solo's of 1. Before
// they start, a child process claims a row of solo and is killed with
// SIGKILL, and another claims a row of acme and is stopped with SIGSTOP;
// mid-run, the fixture expires the dead child's lease, then the stopped
// one's, which is continued once its row was claimed again: its late
// completion, renewal and release are refused. It must hold that:
//
//   - a reader, counting in one statement (one snapshot) the unexpired
//     INPROGRESS rows of each partition, as often as it can, never counts
//     more than the partition's limit (the children's rows counted while
//     their leases run);
//   - the claimers' own tally never does either;
//   - every row ends DONE: the rows a full partition set aside come back.
//
// On a system without SIGKILL and SIGSTOP, the children are left out.
func partitionLimitHoldsUnderConcurrentClaims(e *env) {
	if e.holderChild() {
		return
	}
	const defaultMax, claimers = 2, 8
	own := map[string]int{"acme": 3, "solo": 1}
	e.setPartitionLimit("", defaultMax)
	for p, n := range own {
		e.setPartitionLimit(p, n)
	}
	// The children's rows first: they claim them, one each, in order.
	held := e.enqueue(partitionEvent("solo", "", 0), partitionEvent("acme", "", 0))
	partitions := []string{"acme", "solo", "p0", "p1", "p2", "p3"}
	sizes := map[string]int{"acme": 30, "solo": 12}
	var events []lease.Event
	for _, p := range append(partitions, "") {
		for i := 1; i <= cmp.Or(sizes[p], 15); i++ {
			queue := lease.DefaultQueue
			if i%3 == 0 {
				queue = "mail"
			}
			events = append(events, partitionEvent(p, queue, i))
		}
	}
	e.enqueue(events...)
	total := int64(len(events) + len(held))
	children := e.holdInChildren(held[0], held[1])
	defer children.close()

	seed := rand.Uint64()
	e.t.Logf("seed %d", seed)
	tally := partitionTally(partitions, own, defaultMax)
	reader := e.partitionsLive(own, defaultMax)

	run, stop := context.WithCancel(e.ctx)
	defer stop()
	var done atomic.Int64
	errs := make(chan error, claimers+1)
	fail := func(err error) { errs <- err; stop() }
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := children.during(run, &done, total); err != nil {
			fail(err)
		}
	})
	for w := range claimers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		req := lease.ClaimRequest{Lease: testLease, Worker: fmt.Sprintf("claimer-%d", w)}
		if w >= 5 {
			req.Queue = "mail"
		}
		wg.Go(func() {
			for n := 0; done.Load() < total && run.Err() == nil; n++ {
				req.Limit = 1 + (w+n)%4
				got, err := e.store.Claim(e.ctx, req)
				if err != nil {
					fail(fmt.Errorf("claimer %d: claim: %w", w, err))
					return
				}
				if len(got) == 0 {
					select {
					case <-run.Done():
					case <-time.After(time.Millisecond):
					}
					continue
				}
				tally.add(got)
				for _, c := range got {
					if err := e.endAtRandom(rng, c, tally, &done); err != nil {
						fail(fmt.Errorf("claimer %d: %w", w, err))
						return
					}
				}
			}
		})
	}
	e.claimersDone(&wg, reader, tally, errs, &done, total)
	e.wantAllDone(total)
}

// A keyed event under a partition limit waits for its key's turn and for
// a place. Thirty events over six keys, five a key, in partitions pa and
// pb under a default limit of 2 (keys 0 to 3; keys 4 and 5 in no
// partition), with eight keyless events of the two partitions among them;
// four claimers claim batches of one to three, and complete (half of the
// time taking turns, Store.WriteManyTakingTurns), retry at once, or
// abandon (the lease expired by the fixture) at random, seeded. It must
// hold that: a key never has two events claimed and unfinished at once;
// each key's events are first claimed in enqueue order; neither a reader
// (one snapshot a count) nor the claimers' tally sees more than 2 live
// attempts of a partition; a completion taking turns never hands on an
// event of a limited partition (only those of keys 4 and 5); and every
// event ends DONE.
//
// Then, alone: of three key heads of partition pa (t, v, w) and one of no
// partition (u), a claim takes t, v and u: w, keyed, waits READY (a keyed
// row is never set aside). The completion of t and u taking turns hands
// over u's next event only; t's next is READY, and a claim takes one
// event of pa (t's next or w) with t's place, no more.
func partitionLimitComposesWithKeyOrder(e *env) {
	const keys, perKey, maxPart, claimers = 6, 5, 2, 4
	e.setPartitionLimit("", maxPart)
	partOf := func(k int) string {
		if k >= 4 {
			return ""
		}
		return []string{"pa", "pb"}[k%2]
	}
	var events []lease.Event
	for i := range perKey {
		for k := range keys {
			p := partOf(k)
			events = append(events, lease.Event{Kind: "a", Key: fmt.Sprintf("key-%d", k), Partition: p, MaxAttempts: 100,
				EventID: fmt.Sprintf("%s/key-%d/%d", cmpOrDash(p), k, i)})
		}
		if i < 4 {
			for _, p := range []string{"pa", "pb"} {
				events = append(events, partitionEvent(p, "", i))
			}
		}
	}
	e.enqueue(events...)
	total := int64(len(events))

	tally := partitionTally([]string{"pa", "pb"}, nil, maxPart)
	reader := e.partitionsLive(nil, maxPart)
	e.runKeyOrder(keyOrderRun{total: total, claimers: claimers, tally: tally, reader: reader,
		turns: func(c leasework.Claim, turns []leasework.Claim) string {
			for _, x := range turns {
				if p := partitionOf(x.EventID); p != "" {
					return fmt.Sprintf("the completion of %s handed on %s, of partition %s, which a partition limit covers", c.EventID, x.EventID, p)
				}
			}
			return ""
		}})
	e.wantAllDone(total)

	evs := e.enqueue(
		lease.Event{Kind: "a", Key: "t", Partition: "pa", EventID: "pa/t-1"},
		lease.Event{Kind: "a", Key: "t", Partition: "pa", EventID: "pa/t-2"},
		lease.Event{Kind: "a", Key: "v", Partition: "pa", EventID: "pa/v-1"},
		lease.Event{Kind: "a", Key: "w", Partition: "pa", EventID: "pa/w-1"},
		lease.Event{Kind: "a", Key: "u", EventID: "-/u-1"},
		lease.Event{Kind: "a", Key: "u", EventID: "-/u-2"})
	heads := e.claim(10)
	slices.SortFunc(heads, func(a, b leasework.Claim) int { return cmp.Compare(a.EventID, b.EventID) })
	if len(heads) != 3 || heads[0].EventID != "-/u-1" || heads[1].EventID != "pa/t-1" || heads[2].EventID != "pa/v-1" {
		e.t.Fatalf("claim of the heads = %s; want -/u-1, and pa/t-1 and pa/v-1 (pa's two places)", eventIDs(heads))
	}
	e.wantState(evs[3].ID, leasework.StatusReady, 0) // w-1 waits for a place, READY
	res, turns, err := e.store.WriteManyTakingTurns(e.ctx, lease.ClaimRequest{Limit: 10, Lease: testLease},
		lease.Complete(heads[1].Ref()), lease.Complete(heads[0].Ref()))
	if err = answered(res, err); err == nil {
		err = firstErr(res)
	}
	wantOK(e.t, "completion of pa/t-1 and -/u-1 taking turns", err)
	if len(turns) != 1 || turns[0].EventID != "-/u-2" {
		e.t.Fatalf("the completion of pa/t-1 (partition pa, limited) and -/u-1 took turns %s; want -/u-2 only", eventIDs(turns))
	}
	e.wantState(evs[1].ID, leasework.StatusReady, 0)
	got := e.claimRounds("")
	if len(got) != 1 || (got[0].ID != evs[1].ID && got[0].ID != evs[3].ID) {
		e.t.Fatalf("claims after the turns = %s; want one of pa/t-2 and pa/w-1, with pa/t-1's place", eventIDs(got))
	}
	for _, c := range append(got, heads[2], turns[0]) {
		wantOK(e.t, "complete "+c.EventID, e.write(lease.Complete(c.Ref())))
	}
	rest := evs[3].ID
	if got[0].ID == evs[3].ID {
		rest = evs[1].ID
	}
	e.wantRounds("claims once pa's attempts ended", "", rest)
}

// keyOrderRun is a run of claimers over keyed events under a limit, for
// runKeyOrder.
type keyOrderRun struct {
	total    int64
	claimers int
	tally    *liveTally
	reader   *liveReader
	// turns says what is wrong with the turns the completion of c took,
	// or "".
	turns func(c leasework.Claim, turns []leasework.Claim) string
	// started, when set, is given every claim and every turn taken, as
	// they return.
	started func(got []leasework.Claim)
}

// runKeyOrder runs r's claimers until every event is DONE (see
// limitComposesWithKeyOrder), checking the order of the keyed events
// (those with an event id ending "/seq", seq their place in their key),
// and reports what they, the reader and the tally found.
func (e *env) runKeyOrder(r keyOrderRun) {
	seed := rand.Uint64()
	e.t.Logf("seed %d", seed)
	var mu sync.Mutex
	inFlight := map[string]int64{} // key -> its row claimed and unfinished
	next := map[string]int{}       // key -> the sequence number of its next first claim
	firstClaimed := map[int64]bool{}
	var violations []string
	violate := func(format string, args ...any) {
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}
	// check records claims (how: by a claim, or as a turn) against the
	// order of their keys; finished takes a key out of flight, before the
	// write that ends its row.
	check := func(got []leasework.Claim, how string) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range got {
			if c.Key == "" {
				continue
			}
			if other, ok := inFlight[c.Key]; ok && other != c.ID {
				violate("%s: row %d (%s) of key %s claimed while row %d of the key is unfinished", how, c.ID, c.EventID, c.Key, other)
			}
			inFlight[c.Key] = c.ID
			if firstClaimed[c.ID] {
				continue
			}
			firstClaimed[c.ID] = true
			var seq int
			fmt.Sscan(c.EventID[strings.LastIndexByte(c.EventID, '/')+1:], &seq)
			if seq != next[c.Key] {
				violate("%s: key %s: event %d first claimed when event %d was next", how, c.Key, seq, next[c.Key])
			}
			next[c.Key] = seq + 1
		}
	}
	finished := func(c leasework.Claim) {
		mu.Lock()
		defer mu.Unlock()
		if c.Key != "" && inFlight[c.Key] == c.ID {
			delete(inFlight, c.Key)
		}
	}

	// A claimer that fails stops them all: the claims it holds would
	// never end, and the others would wait for them until the watchdog.
	run, stop := context.WithCancel(e.ctx)
	defer stop()
	var done atomic.Int64
	errs := make(chan error, r.claimers)
	fail := func(err error) { errs <- err; stop() }
	var wg sync.WaitGroup
	for w := range r.claimers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			var pending []leasework.Claim // claims to end, from claims and turns
			for n := 0; done.Load() < r.total && run.Err() == nil; n++ {
				if len(pending) == 0 {
					got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1 + (w+n)%3, Lease: testLease})
					if err != nil {
						fail(fmt.Errorf("claimer %d: claim: %w", w, err))
						return
					}
					if len(got) == 0 {
						select {
						case <-run.Done():
						case <-time.After(time.Millisecond):
						}
						continue
					}
					if r.started != nil {
						r.started(got)
					}
					r.tally.add(got)
					check(got, "claim")
					pending = got
				}
				c := pending[0]
				pending = pending[1:]
				r.tally.remove(c)
				var err error
				switch x := rng.IntN(16); {
				case x < 2:
					// Abandoned: the key stays held, by this row, until it is
					// claimed again and ends.
					err = leasetest.ExpireLease(e.ctx, e.fix, c.ID) // fixture: the owner died holding it
				case x < 4 && c.Attempt < 3:
					err = e.write(lease.Retry(c.Ref(), 0, "again"))
				case x < 10:
					finished(c)
					var turns []leasework.Claim
					turns, err = e.completeTakingTurns(c)
					if len(turns) > 0 {
						if why := r.turns(c, turns); why != "" {
							mu.Lock()
							violate("%s", why)
							mu.Unlock()
						}
						if r.started != nil {
							r.started(turns)
						}
						r.tally.add(turns)
						check(turns, "turn")
						pending = append(pending, turns...)
					}
					if err == nil {
						done.Add(1)
					}
				default:
					finished(c)
					if err = e.write(lease.Complete(c.Ref())); err == nil {
						done.Add(1)
					}
				}
				if err != nil {
					fail(fmt.Errorf("claimer %d: row %d generation %d: %w", w, c.ID, c.Generation, err))
					return
				}
			}
		})
	}
	e.claimersDone(&wg, r.reader, r.tally, errs, &done, r.total)
	if len(violations) > 0 {
		e.t.Errorf("order per key under a limit violated:\n%s", strings.Join(violations, "\n"))
	}
}

// No row a full partition sets aside is left behind. Partitions p1 and p2
// under a default limit of 1 and wide under its own of 2, six events
// each, claimed through the driver under test by one claimer: the first
// claims take one row of p1 and p2 and two of wide, and set the others
// aside (WAITING). Then, round after round, the claimer ends every attempt
// it holds, each in turn by another path: a completion, a retry at once,
// a release, a cancel (Store.Cancel, then the owner's write, refused with
// ErrCancelled, ends it DISCARDED), abandoning it (the lease expired by
// the fixture, the owner's late completion refused), a completion that
// deletes the row in a batch (Store.WriteMany of lease.CompleteAndDelete),
// a completion in the caller's transaction (Store.WriteTx); and each
// time, three claims in a row (placeClaims) take exactly as many rows of
// each partition as it has places and unfinished rows, and a fourth none.
// Every event ends DONE, DISCARDED or deleted, and none is left set aside.
//
// Then four events of p1: a claim takes one and sets three aside; a raise
// of the default to 3 lets the next claims take two more, and clearing
// the default (p1 then under no limit) the last: none is left set aside.
func setAsideRowsAllRun(e *env) {
	own := map[string]int{"wide": 2}
	const defaultMax, per = 1, 6
	e.setPartitionLimit("", defaultMax)
	e.setPartitionLimit("wide", own["wide"])
	partitions := []string{"p1", "p2", "wide"}
	var events []lease.Event
	for _, p := range partitions {
		for i := range per {
			events = append(events, partitionEvent(p, "", i))
		}
	}
	e.enqueue(events...)
	unfinished := map[string]int{}
	for _, p := range partitions {
		unfinished[p] = per
	}

	deleted := 0
	type ending struct {
		name string
		end  func(c leasework.Claim) (finished bool)
	}
	endings := []ending{
		{"a completion", func(c leasework.Claim) bool {
			wantOK(e.t, "complete "+c.EventID, e.write(lease.Complete(c.Ref())))
			return true
		}},
		{"a retry", func(c leasework.Claim) bool {
			wantOK(e.t, "retry "+c.EventID, e.write(lease.Retry(c.Ref(), 0, "again")))
			return false
		}},
		{"a release", func(c leasework.Claim) bool {
			wantOK(e.t, "release "+c.EventID, e.write(lease.Release(c.Ref())))
			return false
		}},
		{"a cancel", func(c leasework.Claim) bool {
			res, err := e.store.Cancel(e.ctx, c.ID, "conformance")
			wantOK(e.t, "cancel "+c.EventID, err)
			if !res.Stopping {
				e.t.Fatalf("cancel of the running %s: %+v; want Stopping", c.EventID, res)
			}
			if err := e.write(lease.Complete(c.Ref())); !errors.Is(err, leasework.ErrCancelled) {
				e.t.Fatalf("the cancelled attempt's completion of %s: %v; want ErrCancelled", c.EventID, err)
			}
			return true
		}},
		{"abandoning it", func(c leasework.Claim) bool {
			e.expire(c.ID) // fixture: its owner died
			wantLost(e.t, "the late completion of "+c.EventID, e.write(lease.Complete(c.Ref())))
			return false
		}},
		{"a completion that deletes the row, in a batch", func(c leasework.Claim) bool {
			res, err := e.store.WriteMany(e.ctx, lease.CompleteAndDelete(c.Ref()))
			if err = answered(res, err); err == nil {
				err = firstErr(res)
			}
			wantOK(e.t, "complete and delete "+c.EventID, err)
			deleted++
			return true
		}},
		{"a completion in the caller's transaction", func(c leasework.Claim) bool {
			tx, err := e.db.BeginTx(e.ctx, nil)
			wantOK(e.t, "begin", err)
			defer tx.Rollback()
			wantOK(e.t, "complete "+c.EventID+" in a transaction", e.store.WriteTx(e.ctx, tx, lease.Complete(c.Ref())))
			wantOK(e.t, "commit", tx.Commit())
			return true
		}},
	}
	n := 0
	for round := 1; ; round++ {
		want, places := map[string]int{}, 0
		for _, p := range partitions {
			if k := min(cmp.Or(own[p], defaultMax), unfinished[p]); k > 0 {
				want[p] = k
				places += k
			}
		}
		if places == 0 {
			break
		}
		if round > 4*per {
			e.t.Fatalf("round %d: events still unfinished: %v", round, unfinished)
		}
		var got []leasework.Claim
		for i := 0; i < placeClaims && len(got) < places; i++ {
			got = append(got, e.claim(100)...)
		}
		if more := e.claim(100); len(more) > 0 {
			got = append(got, more...)
		}
		if have := byPartition(got); !maps.Equal(have, want) {
			e.t.Fatalf("round %d: claims took %v (%s); want %v: each partition's places, or its unfinished rows (a row set aside left behind, or a partition past its limit)",
				round, have, eventIDs(got), want)
		}
		if round == 1 {
			var aside map[string]int = map[string]int{}
			for _, p := range partitions {
				aside[p] = e.setAsideCount(p)
			}
			if w := map[string]int{"p1": per - 1, "p2": per - 1, "wide": per - 2}; !maps.Equal(aside, w) {
				e.t.Fatalf("after the first claims, rows set aside per partition: %v; want %v", aside, w)
			}
		}
		for _, c := range got {
			end := endings[n%len(endings)]
			n++
			if c.Attempt >= 50 {
				end = endings[0] // enough: the budget is 100
			}
			if end.end(c) {
				unfinished[partitionOf(c.EventID)]--
			}
		}
	}
	st, err := e.fix.Stats(e.ctx)
	wantOK(e.t, "stats", err)
	if got := st.Rows[leasework.StatusDone] + st.Rows[leasework.StatusDiscarded]; got != int64(len(events)-deleted) || sumRows(st) != got {
		e.t.Fatalf("after the rounds: %v; want all %d rows DONE or DISCARDED (and %d deleted)", st.Rows, len(events)-deleted, deleted)
	}

	late := make([]lease.Event, 4)
	for i := range late {
		late[i] = partitionEvent("p1", "", per+i)
	}
	evs := e.enqueue(late...)
	first := e.claimRounds("")
	if len(first) != 1 || first[0].ID != evs[0].ID {
		e.t.Fatalf("claims of four new rows of p1 = %s; want the first alone (a limit of 1)", eventIDs(first))
	}
	e.wantSetAside("the new rows of p1 behind the first", evs[1].ID, evs[2].ID, evs[3].ID)
	e.setPartitionLimit("", 3)
	raised := e.claimRounds("")
	if len(raised) != 2 {
		e.t.Fatalf("claims after the default was raised to 3 = %s; want two more rows of p1", eventIDs(raised))
	}
	if _, err := e.fix.ClearLimit(e.ctx, lease.ScopePartition, "", e.t.Name()); err != nil {
		e.t.Fatalf("clear the default partition limit: %v", err)
	}
	cleared := e.claimRounds("")
	if len(cleared) != 1 {
		e.t.Fatalf("claims after the default was cleared = %s; want the last row of p1", eventIDs(cleared))
	}
	if n := e.setAsideCount("p1"); n != 0 {
		e.t.Fatalf("%d rows of p1 still set aside under no limit", n)
	}
	for _, c := range slices.Concat(first, raised, cleared) {
		wantOK(e.t, "complete "+c.EventID, e.write(lease.Complete(c.Ref())))
	}
}

// setAsideCount counts the rows of partition p set aside: WAITING,
// keyless.
func (e *env) setAsideCount(p string) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.fix.QualifiedTable()+`
		WHERE partition_key = $1 AND status = 'WAITING' AND key IS NULL`, p).Scan(&n); err != nil {
		e.t.Fatalf("count the rows of %s set aside: %v", p, err)
	}
	return n
}
