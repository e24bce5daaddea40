package conformance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties of order per key.
func orderProperties() []property {
	return []property{
		{"FIFOPerKeyUnderConcurrentClaimersAndEnqueuers", fifoPerKey},
		{"FailedHeadHoldsItsKey", failedHeadHoldsItsKey},
		{"KilledHeadIsClaimedBeforeFollowers", killedHeadIsClaimedBeforeFollowers},
		{"OrderSurvivesReleasePausedOwnerAndRetry", orderSurvivesReleasePauseRetry},
		{"PromotionNotifiesAtCommit", promotionNotifies},
	}
}

// Many claimers over many rounds, while several enqueuers add events to the
// same keys, each in transactions of its own committed one after another.
// Claimers abandon some claims (their leases then expire by fixture) and
// retry others at once. It must hold that: a key never has two rows in
// progress at once (a claim of a key's row while another row of the key is
// claimed and unfinished is a violation); the events of one enqueuer of one
// key are first claimed in the order it committed them; and every event ends
// DONE.
func fifoPerKey(e *env) {
	const keys, enqueuers, perEnqueuer, workers = 12, 4, 10, 8
	total := keys * enqueuers * perEnqueuer

	var mu sync.Mutex
	inFlight := map[string]int64{}   // key -> the row of the key claimed and not finished
	lastSeq := map[string]int{}      // key/enqueuer -> last first-claimed sequence number
	firstClaimed := map[int64]bool{} // rows claimed at least once
	var violations []string
	violate := func(format string, args ...any) {
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}

	enqDone := make(chan struct{})
	errs := make(chan error, enqueuers+workers)
	var enqWG sync.WaitGroup
	for q := range enqueuers {
		enqWG.Go(func() {
			for i := range perEnqueuer {
				tx, err := e.db.BeginTx(e.ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				events := make([]lease.Event, 0, keys)
				// Keys in a different order per enqueuer: the store must
				// not deadlock on it.
				for k := range keys {
					key := fmt.Sprintf("key-%02d", (k+5*q)%keys)
					if q%2 == 1 {
						key = fmt.Sprintf("key-%02d", (keys-1-k+5*q)%keys)
					}
					events = append(events, lease.Event{Kind: "k", Key: key,
						EventID: fmt.Sprintf("%s/%d/%03d", key, q, i), Payload: []byte(strconv.Itoa(i))})
				}
				if _, err := e.store.Enqueue(e.ctx, tx, events...); err != nil {
					tx.Rollback()
					errs <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errs <- fmt.Errorf("commit enqueue: %w", err)
					return
				}
			}
		})
	}
	go func() { enqWG.Wait(); close(enqDone) }()

	for round := 1; ; round++ {
		if round > 40 {
			e.t.Fatal("rows still unfinished after 40 rounds")
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for n := 0; ; n++ {
					got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1 + (w+n)%4, Lease: testLease})
					if err != nil {
						errs <- err
						return
					}
					if len(got) == 0 {
						select {
						case <-enqDone:
							return
						case <-time.After(time.Millisecond):
							continue
						}
					}
					var done []leasework.Ref
					var retry []lease.Write
					mu.Lock()
					for _, c := range got {
						if other, ok := inFlight[c.Key]; ok && other != c.ID {
							violate("row %d of key %s claimed while row %d of the key is unfinished", c.ID, c.Key, other)
						}
						inFlight[c.Key] = c.ID
						if !firstClaimed[c.ID] {
							firstClaimed[c.ID] = true
							parts := strings.Split(c.EventID, "/")
							seq, _ := strconv.Atoi(parts[2])
							qk := c.Key + "/" + parts[1]
							if last, ok := lastSeq[qk]; ok && seq != last+1 {
								violate("key %s enqueuer %s: event %d first claimed after %d", c.Key, parts[1], seq, last)
							} else if !ok && seq != 0 {
								violate("key %s enqueuer %s: event %d first claimed before event 0", c.Key, parts[1], seq)
							}
							lastSeq[qk] = seq
						}
						switch {
						case (c.ID+int64(round))%7 == 0:
							// abandoned, as by a crashed worker: the key stays held
						case c.Attempt < 3 && (c.ID+int64(n))%5 == 0:
							retry = append(retry, lease.Retry(c.Ref(), 0, "again"))
						default:
							// Finished before the write commits: the
							// next row of the key is promoted only at
							// its commit.
							delete(inFlight, c.Key)
							done = append(done, c.Ref())
						}
					}
					mu.Unlock()
					if len(retry) > 0 {
						res, err := e.store.WriteMany(e.ctx, retry...)
						if err = answered(res, err); err == nil {
							err = firstErr(res)
						}
						if err != nil {
							errs <- fmt.Errorf("retry: %w", err)
							return
						}
					}
					if err := e.completeAll(done); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-errs:
			e.t.Fatal(err)
		default:
		}
		n, err := leasetest.ExpireAllLeases(e.ctx, e.fix) // fixture: the abandoned claims' leases run out
		wantOK(e.t, "expire", err)
		if n == 0 {
			break
		}
	}
	if len(violations) > 0 {
		e.t.Fatalf("order per key violated:\n%s", strings.Join(violations, "\n"))
	}
	st, err := e.fix.Stats(e.ctx)
	wantOK(e.t, "stats", err)
	if st.Rows[leasework.StatusDone] != int64(total) || st.Rows[leasework.StatusDone] != sumRows(st) {
		e.t.Fatalf("after the rounds: %+v; want all %d rows DONE", st, total)
	}
}

// sqlStateLockNotAvailable is what a batch finishing events of several keys
// gets when it gives way to an enqueue of one of them (see lease's package
// doc): nothing was written, and the claims are written again one by one.
const sqlStateLockNotAvailable = "55P03"

// completeAll completes claims in one batch, and, when the batch gives way,
// claim by claim, as the framework does.
func (e *env) completeAll(refs []leasework.Ref) error {
	if len(refs) == 0 {
		return nil
	}
	res, err := e.store.WriteMany(e.ctx, completes(refs)...)
	err = answered(res, err)
	if err != nil && e.target.Driver.SQLState(err) == sqlStateLockNotAvailable && len(refs) > 1 {
		for _, r := range refs {
			if err := e.write(lease.Complete(r)); err != nil {
				return fmt.Errorf("complete %+v alone: %w", r, err)
			}
		}
		return nil
	}
	if err == nil {
		err = firstErr(res)
	}
	if err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	return nil
}

func firstErr(res []lease.Result) error {
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// A FAILED head holds its key: the events behind it are never claimed,
// whatever the other keys do, until it is requeued (then it is claimed
// again, first) or discarded (then the next event is claimed). HeldKeys
// names the key, its head, its error and its followers.
func failedHeadHoldsItsKey(e *env) {
	evs := e.enqueue(
		lease.Event{Kind: "k", EventID: "x-1", Key: "x"},
		lease.Event{Kind: "k", EventID: "x-2", Key: "x"},
		lease.Event{Kind: "k", EventID: "x-3", Key: "x"},
		lease.Event{Kind: "k", EventID: "y-1", Key: "y"},
		lease.Event{Kind: "k", EventID: "y-2", Key: "y"})
	got := e.claim(10)
	if len(got) != 2 || got[0].EventID != "x-1" || got[1].EventID != "y-1" {
		e.t.Fatalf("first claim = %+v; want the heads x-1 and y-1", got)
	}
	wantOK(e.t, "fail x-1", e.write(lease.Fail(got[0].Ref(), "card declined")))
	wantOK(e.t, "complete y-1", e.write(lease.Complete(got[1].Ref())))
	next := e.claim(10)
	if len(next) != 1 || next[0].EventID != "y-2" {
		e.t.Fatalf("claim behind the FAILED head = %+v; want y-2 only", next)
	}
	wantOK(e.t, "complete y-2", e.write(lease.Complete(next[0].Ref())))
	if more := e.claim(10); len(more) != 0 {
		e.t.Fatalf("claimed %+v while x is held by a FAILED head", more)
	}
	held, err := e.fix.HeldKeys(e.ctx, lease.HeldKeysRequest{})
	wantOK(e.t, "held keys", err)
	if len(held) != 1 || held[0].Key != "x" || held[0].HeadID != evs[0].ID || held[0].LastError != "card declined" || held[0].Waiting != 2 {
		e.t.Fatalf("held keys = %+v; want x held by row %d (card declined) with 2 waiting", held, evs[0].ID)
	}

	// Requeue: the head again, not its followers.
	ids, err := e.store.Requeue(e.ctx, lease.RequeueRequest{IDs: []int64{evs[0].ID}})
	wantOK(e.t, "requeue", err)
	if len(ids) != 1 {
		e.t.Fatalf("requeued %v", ids)
	}
	again := e.claim(10)
	if len(again) != 1 || again[0].ID != evs[0].ID || again[0].Generation != e.gen(3) {
		e.t.Fatalf("claim after requeue = %+v; want the head x-1 only, at generation %d", again, e.gen(3))
	}
	wantOK(e.t, "fail x-1 again", e.write(lease.Fail(again[0].Ref(), "declined again")))

	// Discard, guarded by the generation seen.
	if _, err := e.store.Discard(e.ctx, got[0].Ref()); !errors.Is(err, lease.ErrNotFailed) {
		e.t.Fatalf("discard at the generation of the first failure = %v; want ErrNotFailed", err)
	}
	e.wantState(evs[0].ID, leasework.StatusFailed, e.gen(3))
	gen, err := e.store.Discard(e.ctx, again[0].Ref())
	wantOK(e.t, "discard", err)
	if gen != e.gen(4) {
		e.t.Fatalf("discard returned generation %d, want %d", gen, e.gen(4))
	}
	e.wantState(evs[0].ID, leasework.StatusDiscarded, e.gen(4))
	after := e.claim(10)
	if len(after) != 1 || after[0].EventID != "x-2" {
		e.t.Fatalf("claim after discard = %+v; want x-2 only", after)
	}
	e.wantState(evs[2].ID, leasework.StatusWaiting, 0)
}

// The head keeps its key through a release at shutdown, a paused owner
// whose lease expired (its late completion is refused and promotes nothing)
// and a retry scheduled for later: in each case the next claim finds the
// head or nothing, never a follower.
func orderSurvivesReleasePauseRetry(e *env) {
	evs := e.enqueue(
		lease.Event{Kind: "k", EventID: "x-1", Key: "x"},
		lease.Event{Kind: "k", EventID: "x-2", Key: "x"})
	head, follower := evs[0].ID, evs[1].ID
	onlyHead := func(what string, gen int64) leasework.Claim {
		e.t.Helper()
		got := e.claim(10)
		if len(got) != 1 || got[0].ID != head || got[0].Generation != gen {
			e.t.Fatalf("%s: claimed %+v; want only the head, row %d, at generation %d", what, got, head, gen)
		}
		return got[0]
	}

	c1 := onlyHead("first claim", e.gen(1))
	wantOK(e.t, "release", e.write(lease.Release(c1.Ref())))
	e.wantState(follower, leasework.StatusWaiting, 0)

	paused := onlyHead("after release", e.gen(2))
	e.expire(head) // fixture: the owner paused past its lease
	c3 := onlyHead("after the paused owner's lease expired", e.gen(3))
	wantLost(e.t, "paused owner's late complete", e.write(lease.Complete(paused.Ref())))
	e.wantState(follower, leasework.StatusWaiting, 0)

	retried, err := e.store.Write(e.ctx, lease.Retry(c3.Ref(), time.Hour, "later"))
	wantOK(e.t, "retry", err)
	if st := retried.Status; st != leasework.StatusReady {
		e.t.Fatalf("retry left the head %s, want READY", st)
	}
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed %+v while the head's retry is not due", got)
	}
	wantOK(e.t, "make due", leasetest.MakeDue(e.ctx, e.fix, head)) // fixture: the retry delay passes
	c4 := onlyHead("after the retry fell due", e.gen(4))
	wantOK(e.t, "complete", e.write(lease.Complete(c4.Ref())))
	got := e.claim(10)
	if len(got) != 1 || got[0].ID != follower {
		e.t.Fatalf("after the head completed claimed %+v; want the follower, row %d", got, follower)
	}
}

// The head's completion wakes idle workers for the event it promotes: a
// notification with the promoted event's kind, at the completion's commit.
func promotionNotifies(e *env) {
	l := e.listen()
	defer l.Close()
	want := func(what string, kinds ...string) {
		e.t.Helper()
		missing := map[string]bool{}
		for _, k := range kinds {
			missing[k] = true
		}
		for len(missing) > 0 {
			payload, err := l.Wait(e.ctx)
			wantOK(e.t, "wait after "+what, err)
			switch {
			case payload == "": // a reconnection; wait on
			case missing[payload]:
				delete(missing, payload)
			default:
				e.t.Fatalf("notification after %s: payload %q, want one of %v", what, payload, kinds)
			}
		}
	}
	e.enqueue(lease.Event{Kind: "head", Key: "x"}, lease.Event{Kind: "follower", Key: "x"})
	want("enqueue", "head", "follower")
	c := e.claimOne()
	if c.Kind != "head" {
		e.t.Fatalf("claimed %s, want the head", c.Kind)
	}
	wantOK(e.t, "complete", e.write(lease.Complete(c.Ref())))
	want("the head's completion", "follower")
	if got := e.claimOne(); got.Kind != "follower" {
		e.t.Fatalf("claimed %s after the promotion, want the follower", got.Kind)
	}
}

// sumRows counts the rows of every status.
func sumRows(st lease.Stats) int64 {
	var n int64
	for _, c := range st.Rows {
		n += c
	}
	return n
}
