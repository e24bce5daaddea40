package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties of concurrency limits (lease.Limit): at most Max live
// attempts of a kind, or of a queue, across every claimer, an attempt live
// from its claim until it ends or its lease runs out.
func limitProperties() []property {
	return []property{
		{"LimitHoldsUnderConcurrentClaims", limitHoldsUnderConcurrentClaims},
		{"LimitSlotFreesAtLeaseEnd", limitSlotFreesAtLeaseEnd},
		{"LimitComposesWithKeyOrder", limitComposesWithKeyOrder},
		{"KilledLimitHolderFreesItsSlotAtLeaseEnd", killedLimitHolderFreesItsSlot},
		{"PausedLimitHolderIsRefusedAfterItsSlotIsReused", pausedLimitHolderIsRefused},
	}
}

// setLimit declares l through the store under test.
func (e *env) setLimit(l lease.Limit) {
	e.t.Helper()
	if _, err := e.store.SetLimit(e.ctx, l, e.t.Name()); err != nil {
		e.t.Fatalf("set limit %+v: %v", l, err)
	}
}

// Eight claimers, five of the default queue (one of them claiming kind a
// only) and three of queue mail, claim batches of one to four rows through
// the driver under test, each on a connection of the pool, and complete,
// retry, release or abandon each claim at random. Kind a is limited to 3
// live attempts in every queue, queue mail to 4 of every kind; kind b of
// the default queue is not limited. An abandoned claim's lease is expired
// by the fixture at once, mid-run, so that its slot is taken again by a
// later claim while the others run, and its owner's late completion is
// refused. It must hold that:
//
//   - a reader, counting in one statement (one snapshot) the unexpired
//     INPROGRESS rows of kind a and those of queue mail, as often as it
//     can, never counts more than their limit;
//   - the claimers' own tally never does either: a claim is counted from
//     when its claim returns until before its end is written or its lease
//     expired, so the tally is never more than the live attempts then;
//   - every row ends DONE: the limits hold back, they never stall.
//
// The random choices are seeded; the seed is logged.
func limitHoldsUnderConcurrentClaims(e *env) {
	const maxA, maxMail, claimers = 3, 4, 8
	e.setLimit(lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: maxA})
	e.setLimit(lease.Limit{Scope: lease.ScopeQueue, Name: "mail", Max: maxMail})
	var events []lease.Event
	add := func(n int, kind, queue string) {
		for i := range n {
			events = append(events, lease.Event{Kind: kind, Queue: queueArg(queue), MaxAttempts: 100,
				EventID: fmt.Sprintf("%s-%s-%03d", queue, kind, i)})
		}
	}
	add(120, "a", lease.DefaultQueue)
	add(40, "b", lease.DefaultQueue)
	add(30, "a", "mail")
	add(80, "c", "mail")
	e.enqueue(events...)
	total := int64(len(events))

	seed := rand.Uint64()
	e.t.Logf("seed %d", seed)
	tally := newLiveTally(map[string]int{"kind a": maxA, "queue mail": maxMail})
	reader := e.readLive(`
SELECT count(*) FILTER (WHERE kind = $1), count(*) FILTER (WHERE queue = $2)
FROM `+e.fix.QualifiedTable()+`
WHERE status = 'INPROGRESS' AND lease_until > now()`,
		[]any{"a", "mail"}, []string{"kind a", "queue mail"}, []int{maxA, maxMail})

	// A claimer that fails stops them all: the claims it holds would
	// never end, and the others would wait for them until the watchdog.
	run, stop := context.WithCancel(e.ctx)
	defer stop()
	var done atomic.Int64
	errs := make(chan error, claimers)
	fail := func(err error) { errs <- err; stop() }
	var wg sync.WaitGroup
	for w := range claimers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		req := lease.ClaimRequest{Lease: testLease, Worker: fmt.Sprintf("claimer-%d", w)}
		switch {
		case w >= 5:
			req.Queue = "mail"
		case w == 4:
			req.Kinds = []string{"a"}
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
					// The rows left are held by others, or held back.
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

// claimersDone waits for the claimers of a property, stops its reader
// (if it has one), and reports their errors, the rows left unfinished, and
// what the reader and the tally saw.
func (e *env) claimersDone(wg *sync.WaitGroup, reader *liveReader, tally *liveTally, errs chan error, done *atomic.Int64, total int64) {
	wg.Wait()
	if reader != nil {
		reader.stop()
	}
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}
	if n := done.Load(); n < total {
		e.t.Errorf("the claimers stopped with %d of the %d rows completed", n, total)
	}
	if reader != nil {
		e.t.Logf("the reader counted %d times, at most %v live; the tally reached %v", reader.samples, reader.most, tally.most)
		reader.report(e)
	}
	tally.report(e)
}

// wantAllDone stops the property if it failed, and otherwise checks that
// every one of its total rows ended DONE.
func (e *env) wantAllDone(total int64) {
	if e.t.Failed() {
		e.t.FailNow()
	}
	st, err := e.fix.Stats(e.ctx)
	wantOK(e.t, "stats", err)
	if st.Rows[leasework.StatusDone] != total || sumRows(st) != total {
		e.t.Fatalf("after the claimers: %+v; want all %d rows DONE", st.Rows, total)
	}
}

// endAtRandom ends claim c as a claimer chooses at random: most often a
// completion, else a retry at once (on the first two attempts), a release,
// or abandoning it, its lease then expired by the fixture and its late
// completion refused. Its tally entry is taken out first.
func (e *env) endAtRandom(rng *rand.Rand, c leasework.Claim, tally *liveTally, done *atomic.Int64) error {
	tally.remove(c)
	var err error
	switch r := rng.IntN(16); {
	case r < 2:
		if err := leasetest.ExpireLease(e.ctx, e.fix, c.ID); err != nil { // fixture: the owner died holding it
			return err
		}
		if err := e.write(lease.Complete(c.Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			return fmt.Errorf("late completion of row %d generation %d after its lease expired: %v; want ErrLeaseLost", c.ID, c.Generation, err)
		}
		return nil
	case r < 4 && c.Attempt < 3:
		err = e.write(lease.Retry(c.Ref(), 0, "again"))
	case r < 5:
		err = e.write(lease.Release(c.Ref()))
	default:
		if err = e.write(lease.Complete(c.Ref())); err == nil {
			done.Add(1)
		}
	}
	if err != nil {
		return fmt.Errorf("outcome of live row %d generation %d: %w", c.ID, c.Generation, err)
	}
	return nil
}

// liveTally counts the claims held, per limit, as the claimers see them:
// each added once its claim returned, removed before its end is written
// (or its lease expired), so that it never counts more than the live
// attempts of the moment. It records every count over a limit.
type liveTally struct {
	mu    sync.Mutex
	limit map[string]int // limit ("kind a", "queue mail") -> Max
	of    func(leasework.Claim) []string
	live  map[string]int
	most  map[string]int
	over  []string
}

func newLiveTally(limits map[string]int) *liveTally {
	return &liveTally{limit: limits, of: limitsOf, live: map[string]int{}, most: map[string]int{}}
}

// limitsOf are the kind and queue limits a claim counts under.
func limitsOf(c leasework.Claim) []string {
	return []string{"kind " + c.Kind, "queue " + c.Queue}
}

func (t *liveTally) add(claims []leasework.Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range claims {
		for _, l := range t.of(c) {
			limit, ok := t.limit[l]
			if !ok {
				continue
			}
			t.live[l]++
			t.most[l] = max(t.most[l], t.live[l])
			if t.live[l] > limit && len(t.over) < 20 {
				t.over = append(t.over, fmt.Sprintf("%d claims of %s held at once (row %d generation %d the last); its limit is %d",
					t.live[l], l, c.ID, c.Generation, limit))
			}
		}
	}
}

func (t *liveTally) remove(c leasework.Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.of(c) {
		if _, ok := t.limit[l]; ok {
			t.live[l]--
		}
	}
}

// report fails the test with the counts over a limit.
func (t *liveTally) report(e *env) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.over) > 0 {
		e.t.Errorf("the claimers held more claims than a limit allows:\n%s", strings.Join(t.over, "\n"))
	}
}

// liveReader counts the live attempts under limits, one statement (one
// snapshot) a count, in a goroutine of its own, until stopped.
type liveReader struct {
	names   []string
	limit   []int
	quit    chan struct{}
	done    chan struct{}
	samples int
	most    []int
	over    []string
	err     error
}

// readLive starts a reader of query (with args), whose row is a count per
// limit, names and limits in its order.
func (e *env) readLive(query string, args []any, names []string, limits []int) *liveReader {
	r := &liveReader{names: names, limit: limits, quit: make(chan struct{}), done: make(chan struct{}), most: make([]int, len(limits))}
	go func() {
		defer close(r.done)
		counts := make([]int, len(limits))
		dest := make([]any, len(limits))
		for i := range counts {
			dest[i] = &counts[i]
		}
		for {
			select {
			case <-r.quit:
				return
			default:
			}
			if err := e.db.QueryRowContext(e.ctx, query, args...).Scan(dest...); err != nil {
				r.err = err
				return
			}
			r.samples++
			for i, n := range counts {
				r.most[i] = max(r.most[i], n)
				if n > r.limit[i] && len(r.over) < 20 {
					r.over = append(r.over, fmt.Sprintf("count %d: %d live attempts of %s; its limit is %d", r.samples, n, names[i], r.limit[i]))
				}
			}
		}
	}()
	return r
}

// stop stops the reader and waits for it.
func (r *liveReader) stop() {
	close(r.quit)
	<-r.done
}

// report fails the test with the reader's error and its counts over a
// limit. Call it after stop.
func (r *liveReader) report(e *env) {
	if r.err != nil {
		e.t.Errorf("the reader of live attempts: %v", r.err)
	}
	if r.samples == 0 {
		e.t.Error("the reader of live attempts counted nothing")
	}
	if len(r.over) > 0 {
		e.t.Errorf("more live attempts than a limit allows:\n%s", strings.Join(r.over, "\n"))
	}
}

// Under a limit of 1 on kind a, a claimed attempt whose owner is gone (its
// lease expired by the fixture) holds its slot until then and no longer:
// while its lease runs, no claim takes a second row of kind a (a row of an
// unlimited kind is claimed beside it); once it expired, the owner's late
// renewal is refused, and the next claim takes the slot, reclaiming the
// row at its next generation (an expired lease comes before a READY row),
// and no other row of kind a. The old owner's late completion, retry and
// release are refused and free nothing: a claim still takes no row of kind
// a. The row ends at the new owner's outcome (DONE at the second
// generation), and then the slot goes to the next row of kind a.
//
// The same when the next claim cannot take the expired row back: a row of
// kind a in queue other, claimed, its owner gone (lease expired by the
// fixture), gives its slot to a claim of the default queue (one without a
// floor for expired leases, as a worker's sweep is), which takes a READY
// row of kind a; the gone owner's late completion is refused; a claim of
// queue other then takes nothing (kind a is at its limit, and the expired
// row has no slot to come back with), and once the default queue's row
// completes, it reclaims the row at its next generation.
func limitSlotFreesAtLeaseEnd(e *env) {
	e.setLimit(lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
	evs := e.enqueue(
		lease.Event{Kind: "a", EventID: "a-1"},
		lease.Event{Kind: "a", EventID: "a-2"},
		lease.Event{Kind: "b", EventID: "b-1"})
	first := e.claim(10)
	if len(first) != 2 || first[0].EventID != "a-1" || first[1].EventID != "b-1" {
		e.t.Fatalf("first claim = %s; want a-1 (kind a's one slot) and b-1 (kind b has no limit)", eventIDs(first))
	}
	old := first[0]
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim while a-1's owner holds kind a's slot = %s; want nothing", eventIDs(got))
	}

	e.expire(old.ID) // fixture: a-1's owner died, and its lease ran out
	wantLost(e.t, "the gone owner's late renewal", e.write(lease.Renew(old.Ref(), testLease)))
	next := e.claim(10)
	if len(next) != 1 || next[0].ID != old.ID || next[0].Generation != e.gen(2) || !next[0].Reclaimed {
		e.t.Fatalf("claim after a-1's lease ran out = %+v; want a-1 alone, reclaimed at generation %d", next, e.gen(2))
	}
	e.wantState(evs[1].ID, leasework.StatusReady, 0)

	wantLost(e.t, "the old owner's late completion", e.write(lease.Complete(old.Ref())))
	wantLost(e.t, "the old owner's late retry", e.write(lease.Retry(old.Ref(), 0, "late")))
	wantLost(e.t, "the old owner's late release", e.write(lease.Release(old.Ref())))
	wantLost(e.t, "the old owner's late renewal", e.write(lease.Renew(old.Ref(), testLease)))
	e.wantState(old.ID, leasework.StatusInProgress, e.gen(2))
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim after the old owner's refused writes = %s; want nothing (the new owner holds the slot)", eventIDs(got))
	}

	wantOK(e.t, "the new owner's completion", e.write(lease.Complete(next[0].Ref())))
	e.wantState(old.ID, leasework.StatusDone, e.gen(2))
	last := e.claim(10)
	if len(last) != 1 || last[0].EventID != "a-2" {
		e.t.Fatalf("claim after the new owner completed = %s; want a-2", eventIDs(last))
	}
	wantOK(e.t, "a-2's completion", e.write(lease.Complete(last[0].Ref())))

	// A holder that the next claim cannot take back: another queue's.
	other := func() []leasework.Claim {
		e.t.Helper()
		got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 10, Lease: testLease, Queue: "other"})
		wantOK(e.t, "claim of queue other", err)
		return got
	}
	x := e.enqueue(lease.Event{Kind: "a", EventID: "x-1", Queue: "other"})[0]
	gone := other()
	if len(gone) != 1 || gone[0].ID != x.ID {
		e.t.Fatalf("claim of queue other = %s; want x-1", eventIDs(gone))
	}
	e.enqueue(lease.Event{Kind: "a", EventID: "a-3"})
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim while x-1's owner holds kind a's slot = %s; want nothing", eventIDs(got))
	}
	e.expire(x.ID) // fixture: x-1's owner died, and its lease ran out
	sweep := e.claim(10)
	if len(sweep) != 1 || sweep[0].EventID != "a-3" {
		e.t.Fatalf("claim of the default queue after x-1's lease ran out = %s; want a-3, with x-1's slot", eventIDs(sweep))
	}
	wantLost(e.t, "x-1's gone owner's late completion", e.write(lease.Complete(gone[0].Ref())))
	if got := other(); len(got) != 0 {
		e.t.Fatalf("claim of queue other while a-3 holds kind a's slot = %s; want nothing", eventIDs(got))
	}
	wantOK(e.t, "a-3's completion", e.write(lease.Complete(sweep[0].Ref())))
	back := other()
	if len(back) != 1 || back[0].ID != x.ID || back[0].Generation != e.gen(2) || !back[0].Reclaimed {
		e.t.Fatalf("claim of queue other after a-3 completed = %+v; want x-1 alone, reclaimed at generation %d", back, e.gen(2))
	}
}

// eventIDs lists the claims' event ids, for messages.
func eventIDs(claims []leasework.Claim) string {
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.EventID
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// A keyed kind under a limit. Thirty events of kind a over six keys, five
// a key, with kind a limited to 2; four claimers claim batches of one to
// three, and complete (half of the time through Store.WriteManyTakingTurns,
// asking for turns), retry at once, or abandon (the lease then expired by
// the fixture) at random, seeded. It must hold that: a key never has two
// events claimed and unfinished at once; each key's events are first
// claimed in enqueue order; neither a reader (one snapshot a count) nor
// the claimers' tally sees more than 2 live attempts of kind a; a
// completion taking turns takes at most one event of kind a, the next due
// one, with the place it gave up (its key's next event is never handed
// over: it becomes READY, and a claim or a later completion takes it);
// and every event ends DONE.
//
// Then, alone: a head of kind a and a head of the unlimited kind b
// completed in one WriteManyTakingTurns hand over the next event of kind
// b only (so the store does take turns); the next event of kind a is
// READY, and a claim takes it.
func limitComposesWithKeyOrder(e *env) {
	const keys, perKey, maxA, claimers = 6, 5, 2, 4
	e.setLimit(lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: maxA})
	var events []lease.Event
	for i := range perKey {
		for k := range keys {
			events = append(events, lease.Event{Kind: "a", Key: fmt.Sprintf("key-%d", k), MaxAttempts: 100,
				EventID: fmt.Sprintf("key-%d/%d", k, i)})
		}
	}
	e.enqueue(events...)
	total := int64(len(events))

	tally := newLiveTally(map[string]int{"kind a": maxA})
	reader := e.readLive(`
SELECT count(*) FROM `+e.fix.QualifiedTable()+`
WHERE kind = $1 AND status = 'INPROGRESS' AND lease_until > now()`,
		[]any{"a"}, []string{"kind a"}, []int{maxA})
	e.runKeyOrder(keyOrderRun{total: total, claimers: claimers, tally: tally, reader: reader,
		turns: func(c leasework.Claim, turns []leasework.Claim) string {
			if len(turns) > 1 {
				return fmt.Sprintf("the completion of %s took %s of kind a, more than the one place it gave up", c.EventID, eventIDs(turns))
			}
			return ""
		}})
	e.wantAllDone(total)

	// Turns alone: kind b hands over, kind a does not.
	evs := e.enqueue(
		lease.Event{Kind: "a", Key: "t", EventID: "t-1"},
		lease.Event{Kind: "a", Key: "t", EventID: "t-2"},
		lease.Event{Kind: "b", Key: "u", EventID: "u-1"},
		lease.Event{Kind: "b", Key: "u", EventID: "u-2"})
	heads := e.claim(10)
	if len(heads) != 2 || heads[0].EventID != "t-1" || heads[1].EventID != "u-1" {
		e.t.Fatalf("claim of the heads = %s; want t-1 and u-1", eventIDs(heads))
	}
	res, turns, err := e.store.WriteManyTakingTurns(e.ctx, lease.ClaimRequest{Limit: 10, Lease: testLease},
		lease.Complete(heads[0].Ref()), lease.Complete(heads[1].Ref()))
	if err = answered(res, err); err == nil {
		err = firstErr(res)
	}
	wantOK(e.t, "completion of t-1 and u-1 taking turns", err)
	if len(turns) != 1 || turns[0].EventID != "u-2" {
		e.t.Fatalf("the completion of t-1 (kind a, limited) and u-1 (kind b) took turns %s; want u-2 only", eventIDs(turns))
	}
	e.wantState(evs[1].ID, leasework.StatusReady, 0)
	got := e.claim(10)
	if len(got) != 1 || got[0].EventID != "t-2" {
		e.t.Fatalf("claim after the turns = %s; want t-2, which the completion left READY", eventIDs(got))
	}
}

// completeTakingTurns completes c through Store.WriteManyTakingTurns,
// asking for up to two turns of any kind, and returns the turns it took;
// when the batch gives way to an enqueue (SQLSTATE 55P03), it completes
// c alone, as completeAll does.
func (e *env) completeTakingTurns(c leasework.Claim) ([]leasework.Claim, error) {
	res, turns, err := e.store.WriteManyTakingTurns(e.ctx, lease.ClaimRequest{Limit: 2, Lease: testLease}, lease.Complete(c.Ref()))
	if err = answered(res, err); err == nil {
		err = firstErr(res)
	}
	if err != nil && e.target.Driver.SQLState(err) == sqlStateLockNotAvailable {
		return nil, e.write(lease.Complete(c.Ref()))
	}
	if err != nil {
		return turns, fmt.Errorf("complete taking turns: %w", err)
	}
	return turns, nil
}
