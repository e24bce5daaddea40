package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// These tests combine order per key with completion in the handler's own
// transaction: the follower of a key is promoted by the commit-time trigger
// of the handler's transaction, not by a write of the worker.

// keyedEffects creates the business table of a keyed test: one row per
// applied effect, in commit order of the handlers' transactions (a key's
// effects are committed one at a time), with the event's key, the sequence
// number its payload carries and the key_seq its row had when the effect
// was written. No unique key: an effect applied twice shows as two rows.
func keyedEffects(t testing.TB, s *lease.Store) string {
	t.Helper()
	table := ident(s.Schema()) + ".keyed_effects"
	execSQL(t, s, "CREATE TABLE "+table+` (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		event_id text NOT NULL, key text NOT NULL, seq int NOT NULL, key_seq bigint NOT NULL)`)
	return table
}

// insertKeyedEffect writes c's effect in tx, reading its row's key_seq in
// the same transaction.
func insertKeyedEffect(ctx context.Context, tx *sql.Tx, s *lease.Store, table string, c *leasework.Claim) error {
	seq, err := strconv.Atoi(string(c.Payload))
	if err != nil {
		return leasework.Permanent(err)
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+table+` (event_id, key, seq, key_seq)
		SELECT $1, $2, $3, key_seq FROM `+s.QualifiedTable()+` WHERE id = $4`, c.EventID, c.Key, seq, c.ID)
	return err
}

// keyedEffect is one row of a keyed effects table.
type keyedEffect struct {
	eventID string
	seq     int
	keySeq  int64
}

// effectsByKey returns each key's effects in the order they were written.
func effectsByKey(t testing.TB, s *lease.Store, table string) map[string][]keyedEffect {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), "SELECT key, event_id, seq, key_seq FROM "+table+" ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]keyedEffect{}
	for rows.Next() {
		var key string
		var e keyedEffect
		if err := rows.Scan(&key, &e.eventID, &e.seq, &e.keySeq); err != nil {
			t.Fatal(err)
		}
		got[key] = append(got[key], e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkKeyOrder fails the test unless each key's effects were written in
// its rows' key order (strictly increasing key_seq: each event once, in
// enqueue commit order) and, when wantSeqs is given, carry the payload
// sequence numbers 0 .. wantSeqs-1 in that order.
func checkKeyOrder(t testing.TB, effects map[string][]keyedEffect, keys []string, wantSeqs int) {
	t.Helper()
	for _, key := range keys {
		es := effects[key]
		for i, e := range es {
			if i > 0 && e.keySeq <= es[i-1].keySeq {
				t.Errorf("key %s: effect %d (event %s, key_seq %d) written after key_seq %d: out of order or twice",
					key, i, e.eventID, e.keySeq, es[i-1].keySeq)
			}
			if wantSeqs > 0 && e.seq != i {
				t.Errorf("key %s: effect %d carries sequence %d; want %d", key, i, e.seq, i)
			}
		}
		if wantSeqs > 0 && len(es) != wantSeqs {
			t.Errorf("key %s: %d effects; want %d", key, len(es), wantSeqs)
		}
	}
}

// checkNoKeyStranded fails the test if a row is left unfinished (READY,
// INPROGRESS, WAITING or FAILED) once every event has been handled, or if a
// key has waiting rows and no head to wait for.
func checkNoKeyStranded(t testing.TB, s *lease.Store) {
	t.Helper()
	var unfinished, stranded int
	err := s.DB().QueryRowContext(context.Background(), `SELECT
		count(*) FILTER (WHERE status IN ('READY', 'INPROGRESS', 'WAITING', 'FAILED')),
		count(*) FILTER (WHERE status = 'WAITING' AND NOT EXISTS (
			SELECT 1 FROM `+s.QualifiedTable()+` AS h
			WHERE h.key = o.key AND h.status IN ('READY', 'INPROGRESS', 'FAILED')))
		FROM `+s.QualifiedTable()+` AS o`).Scan(&unfinished, &stranded)
	if err != nil {
		t.Fatal(err)
	}
	if unfinished != 0 || stranded != 0 {
		t.Errorf("%d rows unfinished, %d waiting with no head; want none", unfinished, stranded)
	}
}

// oneAtATime records the keys whose handlers are running and counts the
// times a key's handler started while another of the key was running.
type oneAtATime struct {
	mu       sync.Mutex
	running  map[string]bool
	overlaps int
}

func (o *oneAtATime) enter(key string) (leave func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == nil {
		o.running = map[string]bool{}
	}
	if o.running[key] {
		o.overlaps++
	}
	o.running[key] = true
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.running[key] = false
	}
}

func (o *oneAtATime) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.overlaps
}

// keyedWorker makes a worker of a keyed test: DONE rows kept (the default
// dedupe window) or deleted at completion. Its lease is long and its
// renewals rare, so that only the fixtures expire its claims: a renewal
// between a fixture's expiry and the stale owner's completion would end
// the attempt as lost before its completion is rejected.
func keyedWorker(t testing.TB, s *lease.Store, deleteAtCompletion bool, concurrency int) *framework.Worker {
	t.Helper()
	w, err := framework.New(s.DB(), s.Driver(), framework.Config{
		Schema: s.Schema(), Table: s.Table(), Concurrency: concurrency, PollInterval: 20 * time.Millisecond,
		Lease: 2 * time.Minute, RenewEvery: time.Minute,
		DeleteAtCompletion: deleteAtCompletion, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// checkFinished fails the test unless every row is DONE (kept) or gone
// (deleted at completion).
func checkFinished(t testing.TB, s *lease.Store, deleteAtCompletion bool, total int) {
	t.Helper()
	var done, all int
	if err := s.DB().QueryRowContext(context.Background(),
		`SELECT count(*) FILTER (WHERE status = 'DONE'), count(*) FROM `+s.QualifiedTable()).Scan(&done, &all); err != nil {
		t.Fatal(err)
	}
	want := total
	if deleteAtCompletion {
		want = 0
	}
	if done != want || all != want {
		t.Errorf("%d rows, %d of them DONE; want %d, all DONE", all, done, want)
	}
}

// Transactional handlers on events of many keys, with many slots, some
// first attempts failing (rolled back, retried): each key's events are
// handled one at a time, in enqueue order, each effect written exactly once
// with its completion, in both retention modes and through both drivers.
// Every completion is made in a handler's transaction, so every follower
// was promoted by the commit of its head's handler transaction.
func TestTransactionalKeyedEffectsInOrderExactlyOnce(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, del := range []bool{false, true} {
			t.Run(fmt.Sprintf("DeleteAtCompletion=%v", del), func(t *testing.T) {
				const nkeys, perKey = 8, 10
				s := newStore(t, drv)
				table := keyedEffects(t, s)
				w := keyedWorker(t, s, del, 8)
				var order oneAtATime
				registerTx(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond, RandomizationFactor: -1},
					func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
						defer order.enter(c.Key)()
						if err := insertKeyedEffect(ctx, tx, s, table, c); err != nil {
							return err
						}
						if c.Attempt == 1 && (len(c.Key)+int(c.ID))%5 == 0 {
							return errors.New("first attempts of some events fail after their write")
						}
						return nil
					})
				stop := start(t, w)
				keys := make([]string, nkeys)
				for k := range keys {
					keys[k] = fmt.Sprintf("acct-%02d", k)
				}
				// Enqueued while the worker runs, one transaction per round,
				// keys given in reverse: heads finish while followers arrive.
				for i := range perKey {
					events := make([]lease.Event, nkeys)
					for k := range events {
						events[k] = lease.Event{Kind: "k", Key: keys[nkeys-1-k], Payload: []byte(strconv.Itoa(i))}
					}
					pgtest.Enqueue(t, s, events...)
				}
				waitFor(t, "every event completed", func() bool { return w.Counters().Completed == nkeys*perKey })
				stop()

				checkKeyOrder(t, effectsByKey(t, s, table), keys, perKey)
				checkNoKeyStranded(t, s)
				checkFinished(t, s, del, nkeys*perKey)
				if n := order.count(); n != 0 {
					t.Errorf("%d times a key's handler started while another of its events was being handled", n)
				}
				if c := w.Counters(); c.Completed != nkeys*perKey || c.StaleRejections != 0 || c.OutcomesAbandoned != 0 ||
					c.Failed != 0 || c.LeasesLost != 0 {
					t.Errorf("counters %+v; want %d completed, nothing rejected, abandoned, failed or lost", c, nkeys*perKey)
				}
			})
		}
	})
}

// A Transactional handler that enqueues the next event of its own key in
// the transaction that completes it, while other events of the same keys
// are enqueued from outside: each key's events are handled one at a time
// in their enqueue commit order, every chain runs to its end, and no row is
// left waiting with no head (the follow-up's commit-time step and the
// head's release run in one commit under the key's lock).
func TestTransactionalEnqueuesFollowUpOfItsKey(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, del := range []bool{false, true} {
			t.Run(fmt.Sprintf("DeleteAtCompletion=%v", del), func(t *testing.T) {
				const nkeys, chain, outside = 8, 6, 5
				s := newStore(t, drv)
				table := keyedEffects(t, s)
				w := keyedWorker(t, s, del, 6)
				var order oneAtATime
				registerTx(t, w, "chain", framework.RetryPolicy{InitialInterval: time.Millisecond, RandomizationFactor: -1},
					func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
						defer order.enter(c.Key)()
						if err := insertKeyedEffect(ctx, tx, s, table, c); err != nil {
							return err
						}
						seq, _ := strconv.Atoi(string(c.Payload))
						if seq+1 < chain {
							if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "chain", Key: c.Key, Payload: []byte(strconv.Itoa(seq + 1))}); err != nil {
								return err
							}
						}
						if c.Attempt == 1 && seq%3 == 1 {
							return errors.New("rolled back with its follow-up")
						}
						return nil
					})
				registerTx(t, w, "outside", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
					defer order.enter(c.Key)()
					return insertKeyedEffect(ctx, tx, s, table, c)
				})
				stop := start(t, w)
				keys := make([]string, nkeys)
				heads := make([]lease.Event, nkeys)
				for k := range keys {
					keys[k] = fmt.Sprintf("order-%02d", k)
					heads[k] = lease.Event{Kind: "chain", Key: keys[k], Payload: []byte("0")}
				}
				pgtest.Enqueue(t, s, heads...)
				for i := range outside {
					events := make([]lease.Event, nkeys)
					for k := range events {
						events[k] = lease.Event{Kind: "outside", Key: keys[k], Payload: []byte(strconv.Itoa(100 + i))}
					}
					pgtest.Enqueue(t, s, events...)
				}
				total := int64(nkeys * (chain + outside))
				waitFor(t, "every event completed", func() bool { return w.Counters().Completed == total })
				stop()

				effects := effectsByKey(t, s, table)
				checkKeyOrder(t, effects, keys, 0)
				for _, key := range keys {
					next, nextOutside := 0, 100
					for _, e := range effects[key] {
						switch {
						case e.seq < 100 && e.seq == next:
							next++
						case e.seq >= 100 && e.seq == nextOutside:
							nextOutside++
						default:
							t.Errorf("key %s: effect of %d out of order (next chain %d, next outside %d)", key, e.seq, next, nextOutside)
						}
					}
					if next != chain || nextOutside != 100+outside {
						t.Errorf("key %s: %d chain and %d outside effects; want %d and %d", key, next, nextOutside-100, chain, outside)
					}
				}
				checkNoKeyStranded(t, s)
				checkFinished(t, s, del, int(total))
				if n := order.count(); n != 0 {
					t.Errorf("%d times a key's handler started while another of its events was being handled", n)
				}
				if c := w.Counters(); c.Completed != total || c.StaleRejections != 0 || c.OutcomesAbandoned != 0 || c.Failed != 0 {
					t.Errorf("counters %+v; want %d completed, nothing rejected, abandoned or failed", c, total)
				}
			})
		}
	})
}

// A stale owner of a key's head, paused past its lease while a rival
// claimed the head again: its completion in its transaction is rejected,
// its effect rolled back, and the key is not released (the follower stays
// WAITING). The rival's completion, in its own transaction with its
// effect, promotes the follower once, and the worker then handles it.
func TestTransactionalStaleKeyedHeadKeepsItsKey(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, del := range []bool{false, true} {
			t.Run(fmt.Sprintf("DeleteAtCompletion=%v", del), func(t *testing.T) {
				ctx := context.Background()
				s := newStore(t, drv)
				table := keyedEffects(t, s)
				out := pgtest.Enqueue(t, s,
					lease.Event{Kind: "k", EventID: "head", Key: "acct", Payload: []byte("0")},
					lease.Event{Kind: "k", EventID: "follower", Key: "acct", Payload: []byte("1")})
				head, follower := out[0].ID, out[1].ID
				// One slot, held by the paused handler: the worker cannot
				// claim the expired head again itself.
				w := keyedWorker(t, s, del, 1)
				written, resume := make(chan struct{}), make(chan struct{})
				registerTx(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
					if err := insertKeyedEffect(ctx, tx, s, table, c); err != nil {
						return err
					}
					if c.EventID == "head" {
						close(written)
						<-resume // paused past the lease while a rival takes over
					}
					return nil
				})
				start(t, w)
				recv(t, written, "the stale owner's business write")
				if err := leasetest.ExpireLease(ctx, s, head); err != nil {
					t.Fatal(err)
				}
				rival, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute, Worker: "rival"})
				if err != nil || len(rival) != 1 || rival[0].ID != head || rival[0].Generation != 2 {
					t.Fatalf("rival claim = %+v, %v; want the head alone, generation 2", rival, err)
				}
				close(resume)
				waitFor(t, "the stale completion to be rejected", func() bool { return w.Counters().StaleRejections == 1 })
				if got := effectsByKey(t, s, table)["acct"]; len(got) != 0 {
					t.Errorf("effects %+v after the stale completion; want its effect rolled back", got)
				}
				if r, err := s.Get(ctx, follower); err != nil || r.Status != leasework.StatusWaiting {
					t.Errorf("follower = %+v, %v after the stale completion; want WAITING (the key not released)", r, err)
				}
				if r, err := s.KeyHead(ctx, "acct"); err != nil || r == nil || r.ID != head || r.Generation != 2 || r.Worker != "rival" {
					t.Errorf("key head = %+v, %v; want the rival's claim of the head", r, err)
				}

				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := insertKeyedEffect(ctx, tx, s, table, &rival[0]); err != nil {
					t.Fatal(err)
				}
				complete := lease.Complete(rival[0].Ref())
				if del {
					complete = lease.CompleteAndDelete(rival[0].Ref())
				}
				if err := s.WriteTx(ctx, tx, complete); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the follower to be handled", func() bool { return w.Counters().Completed == 1 })

				effects := effectsByKey(t, s, table)
				checkKeyOrder(t, effects, []string{"acct"}, 2)
				if got := effects["acct"]; len(got) == 2 && (got[0].eventID != "head" || got[1].eventID != "follower") {
					t.Errorf("effects %+v; want the rival's head, then the follower", got)
				}
				if del {
					if _, err := s.Get(ctx, follower); !errors.Is(err, lease.ErrNotFound) {
						t.Errorf("follower Get = %v; want deleted at completion", err)
					}
				} else if r, err := s.Get(ctx, follower); err != nil || r.Status != leasework.StatusDone || r.Generation != 1 {
					t.Errorf("follower = %+v, %v; want DONE at generation 1 (promoted and claimed once)", r, err)
				}
				checkNoKeyStranded(t, s)
				if c := w.Counters(); c.Claimed != 2 || c.Completed != 1 || c.StaleRejections != 1 || c.LeasesLost != 1 || c.OutcomesAbandoned != 0 {
					t.Errorf("counters %+v; want 2 claims, 1 stale rejection, 1 completion", c)
				}
			})
		}
	})
}

// logCounter is a slog handler that counts records whose message or
// attributes contain a string.
type logCounter struct {
	mu     sync.Mutex
	needle string
	n      int
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	found := strings.Contains(r.Message, h.needle)
	r.Attrs(func(a slog.Attr) bool {
		found = found || strings.Contains(a.Value.String(), h.needle)
		return !found
	})
	if found {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}

func (h *logCounter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// holdKeyLock opens a transaction that enqueues an event of key and takes
// the key's commit-time lock, as an enqueue does during its COMMIT; commit
// ends it as that enqueue's commit would. It returns the enqueued row's id.
func holdKeyLock(t *testing.T, s *lease.Store, key string) (tx *sql.Tx, id int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	out, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Key: key, EventID: key + "-late", Payload: []byte(key + "-late")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('leasework-key:' || $1 || ':' || $2, 0))`,
		s.Schema()+"."+s.Table(), key); err != nil {
		t.Fatal(err)
	}
	return tx, out[0].ID
}

// waitKeyLockWaiters waits until n transactions wait for a key's lock.
func waitKeyLockWaiters(t *testing.T, s *lease.Store, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d transactions to wait for a key's lock", n), func() bool {
		var got int
		if err := s.DB().QueryRowContext(context.Background(),
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got == n
	})
}

// handledOrder records the payloads handled per key, in order.
type handledOrder struct {
	mu  sync.Mutex
	got map[string][]string
}

func (h *handledOrder) add(key, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.got == nil {
		h.got = map[string][]string{}
	}
	h.got[key] = append(h.got[key], payload)
}

func (h *handledOrder) of(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got[key]...)
}

// A batch of completions over two keys, one of whose locks an enqueue holds
// in its commit, gives way (55P03); the worker writes the batch again claim
// by claim: the free key's completion at once, the other's once the
// enqueue commits, which then promotes that key's follower. Every outcome
// is recorded: nothing abandoned, nothing rejected, every event handled
// once and in order.
//
// The batch is made deterministic: the first completion waits for its
// key's lock (held by the test) while the two others queue up behind it,
// in the order that makes the batch meet the free key first.
func TestKeyedCompletionBatchGivesWayAndIsWrittenClaimByClaim(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := newStore(t, drv)
		keys := []string{"k1", "k2", "k3"}
		var heads, followers []lease.Event
		for _, k := range keys {
			heads = append(heads, lease.Event{Kind: "k", Key: k, EventID: k + "-head", Payload: []byte(k + "-head")})
			followers = append(followers, lease.Event{Kind: "k", Key: k, EventID: k + "-next", Payload: []byte(k + "-next")})
		}
		ids := pgtest.Enqueue(t, s, heads...)
		pgtest.Enqueue(t, s, followers...)
		if !(ids[0].ID < ids[1].ID && ids[1].ID < ids[2].ID) {
			t.Fatalf("heads %+v: the test needs them in key order", ids)
		}

		gives := &logCounter{needle: "gives way"}
		w := newWorker(t, s, framework.Config{Concurrency: 3, PollInterval: 20 * time.Millisecond, Logger: slog.New(gives)})
		entered := make(chan string, 3)
		gates := map[string]chan struct{}{"k1": make(chan struct{}), "k2": make(chan struct{}), "k3": make(chan struct{})}
		var order handledOrder
		var running oneAtATime
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			defer running.enter(c.Key)()
			order.add(c.Key, string(c.Payload))
			if c.EventID == c.Key+"-head" {
				entered <- c.Key
				<-gates[c.Key]
			}
			return nil
		})
		start(t, w)
		for range keys {
			recv(t, entered, "the heads' handlers")
		}

		k1, _ := holdKeyLock(t, s, "k1")
		k3, late3 := holdKeyLock(t, s, "k3")
		close(gates["k1"])
		waitKeyLockWaiters(t, s, 1) // k1's completion, alone, waits for its key
		// k2's outcome queued before k3's: the batch meets k2 first and
		// takes its lock (a batch waits for its first key like anyone),
		// then meets k3's lock held.
		close(gates["k2"])
		waitFor(t, "k2's outcome to queue behind k1's", func() bool { return framework.QueuedOutcomes(w) == 1 })
		close(gates["k3"])
		waitFor(t, "k3's outcome to queue behind k2's", func() bool { return framework.QueuedOutcomes(w) == 2 })
		if err := k1.Commit(); err != nil {
			t.Fatal(err)
		}
		// The batch [k2, k3] gives way at k3; k2 is then written alone, and
		// k3 alone waits for its key.
		waitFor(t, "the batch to give way", func() bool { return gives.count() > 0 })
		waitRow(t, s, ids[1].ID, "k2's head completed", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		waitKeyLockWaiters(t, s, 1)
		if r, err := s.Get(ctx, ids[2].ID); err != nil || r.Status != leasework.StatusInProgress {
			t.Fatalf("k3's head = %+v, %v while the enqueue holds its key; want INPROGRESS", r, err)
		}
		if err := k3.Commit(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == 8 })

		for _, k := range keys {
			want := []string{k + "-head", k + "-next"}
			if k != "k2" {
				want = append(want, k+"-late")
			}
			if got := order.of(k); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("key %s handled %v; want %v", k, got, want)
			}
		}
		if r, err := s.Get(ctx, late3); err != nil || r.Status != leasework.StatusDone || r.Generation != 1 {
			t.Errorf("k3's late event = %+v, %v; want DONE at generation 1", r, err)
		}
		checkNoKeyStranded(t, s)
		if n := running.count(); n != 0 {
			t.Errorf("%d times a key's handler started while another of its events was being handled", n)
		}
		if c := w.Counters(); c.Completed != 8 || c.OutcomesAbandoned != 0 || c.StaleRejections != 0 || c.Claimed != 8 {
			t.Errorf("counters %+v; want 8 claimed and completed, nothing abandoned or rejected", c)
		}
	})
}

// A burst of enqueues of the same keys, from several transactions at once
// (each giving its keys in a shuffled order), while a worker with many
// slots completes them in batches: whatever batch gives way, every outcome
// is recorded (nothing abandoned, nothing left INPROGRESS or WAITING with
// no head), no enqueue deadlocks, and each key's events are handled one at
// a time in each enqueuer's order. The number of batches that gave way is
// logged: it depends on the timing.
func TestKeyedCompletionsUnderEnqueueBurst(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const nkeys, enqueuers, rounds = 8, 4, 20
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		s := newStore(t, drv)
		gives := &logCounter{needle: "gives way"}
		w := newWorker(t, s, framework.Config{Concurrency: 16, PollInterval: 20 * time.Millisecond, Logger: slog.New(gives)})
		var order handledOrder
		var running oneAtATime
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			defer running.enter(c.Key)()
			order.add(c.Key, string(c.Payload))
			return nil
		})
		start(t, w)
		keys := make([]string, nkeys)
		for k := range keys {
			keys[k] = fmt.Sprintf("key-%02d", k)
		}
		pgtest.EnqueueShuffled(t, seed, keys, enqueuers, rounds, func(_ int, events []lease.Event) error {
			_, err := pgtest.EnqueueCommitted(context.Background(), s, events...)
			return err
		})
		total := int64(nkeys * enqueuers * rounds)
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == total })
		t.Logf("%d completion batches gave way", gives.count())

		for _, k := range keys {
			next := make([]int, enqueuers)
			got := order.of(k)
			for _, p := range got {
				var g, i int
				if _, err := fmt.Sscanf(p, "%d:%d", &g, &i); err != nil {
					t.Fatal(err)
				}
				if i != next[g] {
					t.Errorf("key %s: enqueuer %d's round %d handled when %d was next", k, g, i, next[g])
				}
				next[g] = i + 1
			}
			if len(got) != enqueuers*rounds {
				t.Errorf("key %s: %d events handled; want %d", k, len(got), enqueuers*rounds)
			}
		}
		checkNoKeyStranded(t, s)
		if n := running.count(); n != 0 {
			t.Errorf("%d times a key's handler started while another of its events was being handled", n)
		}
		if c := w.Counters(); c.Completed != total || c.OutcomesAbandoned != 0 || c.StaleRejections != 0 || c.Claimed != total {
			t.Errorf("counters %+v; want %d claimed and completed, nothing abandoned or rejected", c, total)
		}
	})
}

// Transactional handlers of one key's events that each enqueue an event of
// another key in the transaction completing them (an order's event
// publishing to its account), many at once with outside enqueues of the
// same account keys: a commit that finishes one key and enqueues another
// may give way or be chosen as a deadlock victim; it is then rolled back
// whole (its effect and its follow-up with it) and retried. Every effect
// exists once, each key's events are handled one at a time in key_seq
// order, no row is left waiting with no head, and no outcome is abandoned.
func TestTransactionalEnqueuesIntoAnotherKey(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const orders, perOrder, accounts, outside = 12, 4, 3, 10
		s := newStore(t, drv)
		table := keyedEffects(t, s)
		w := keyedWorker(t, s, false, 8)
		var order oneAtATime
		policy := framework.RetryPolicy{InitialInterval: time.Millisecond, RandomizationFactor: -1, MaxAttempts: 1000}
		registerTx(t, w, "order", policy, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			defer order.enter(c.Key)()
			if err := insertKeyedEffect(ctx, tx, s, table, c); err != nil {
				return err
			}
			var n int
			if _, err := fmt.Sscanf(c.Key, "order-%d", &n); err != nil {
				return leasework.Permanent(err)
			}
			_, err := s.Enqueue(ctx, tx, lease.Event{Kind: "account", Key: fmt.Sprintf("acct-%d", n%accounts),
				EventID: "acct-of-" + c.EventID, Payload: []byte("0")})
			return err
		})
		registerTx(t, w, "account", policy, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			defer order.enter(c.Key)()
			return insertKeyedEffect(ctx, tx, s, table, c)
		})
		stop := start(t, w)
		keys := []string{}
		for i := range perOrder {
			events := make([]lease.Event, orders)
			for k := range events {
				events[k] = lease.Event{Kind: "order", Key: fmt.Sprintf("order-%02d", k), EventID: fmt.Sprintf("o%02d-%d", k, i), Payload: []byte(strconv.Itoa(i))}
			}
			pgtest.Enqueue(t, s, events...)
		}
		for k := range orders {
			keys = append(keys, fmt.Sprintf("order-%02d", k))
		}
		for a := range accounts {
			keys = append(keys, fmt.Sprintf("acct-%d", a))
		}
		for i := range outside {
			events := make([]lease.Event, accounts)
			for a := range events {
				events[a] = lease.Event{Kind: "account", Key: fmt.Sprintf("acct-%d", a), Payload: []byte(strconv.Itoa(i))}
			}
			pgtest.Enqueue(t, s, events...)
		}
		total := int64(orders*perOrder*2 + accounts*outside)
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == total })
		stop()

		effects := effectsByKey(t, s, table)
		checkKeyOrder(t, effects, keys, 0)
		n := 0
		for _, es := range effects {
			n += len(es)
		}
		if n != int(total) {
			t.Errorf("%d effects; want %d, one per event", n, total)
		}
		checkNoKeyStranded(t, s)
		if n := order.count(); n != 0 {
			t.Errorf("%d times a key's handler started while another of its events was being handled", n)
		}
		c := w.Counters()
		t.Logf("counters %+v", c)
		if c.Completed != total || c.StaleRejections != 0 || c.OutcomesAbandoned != 0 || c.Failed != 0 {
			t.Errorf("counters %+v; want %d completed, nothing rejected, abandoned or failed", c, total)
		}
	})
}

// A Transactional handler's commit that enqueues into one key and finishes
// another gives way (55P03) when the finished key's lock is held, as an
// enqueue of both keys would hold it while it waits for the first: the
// whole transaction is rolled back (its effect and its follow-up too), the
// worker records a retry, and the next attempt commits both once.
func TestTransactionalCommitGivesWayAndIsRetried(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := newStore(t, drv)
		table := keyedEffects(t, s)
		id := pgtest.Enqueue(t, s, lease.Event{Kind: "order", Key: "order-1", EventID: "o1", Payload: []byte("0")})[0].ID
		w := keyedWorker(t, s, false, 2)
		// The retry is due in an hour; the test makes it due (a fixture) once
		// the key's lock is released.
		registerTx(t, w, "order", framework.RetryPolicy{InitialInterval: time.Hour, RandomizationFactor: -1},
			func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
				if err := insertKeyedEffect(ctx, tx, s, table, c); err != nil {
					return err
				}
				_, err := s.Enqueue(ctx, tx, lease.Event{Kind: "account", Key: "acct-1", EventID: "acct-of-o1", Payload: []byte("0")})
				return err
			})
		registerTx(t, w, "account", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			return insertKeyedEffect(ctx, tx, s, table, c)
		})
		holder, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('leasework-key:' || $1 || ':' || $2, 0))`,
			s.Schema()+"."+s.Table(), "order-1"); err != nil {
			t.Fatal(err)
		}
		start(t, w)
		r := waitRow(t, s, id, "the first attempt's commit to give way and be retried", func(r lease.Row) bool {
			return r.Status == leasework.StatusReady && r.Attempt == 1
		})
		if !strings.Contains(r.LastError, "gives way") || !strings.Contains(r.LastError, "rolled back at its commit") ||
			strings.Contains(r.LastError, "may have committed") {
			t.Errorf("the retried row's error is %q; want the commit's giving way, said to have rolled back", r.LastError)
		}
		if got := effectsByKey(t, s, table); len(got) != 0 {
			t.Errorf("effects %+v after the commit gave way; want none", got)
		}
		if _, err := s.GetByEventID(ctx, "acct-of-o1"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("the follow-up after the commit gave way: %v; want it rolled back", err)
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := leasetest.MakeDue(ctx, s, id); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "both events completed", func() bool { return w.Counters().Completed == 2 })
		effects := effectsByKey(t, s, table)
		if len(effects["order-1"]) != 1 || len(effects["acct-1"]) != 1 {
			t.Errorf("effects %+v; want one per event", effects)
		}
		checkNoKeyStranded(t, s)
		if c := w.Counters(); c.Completed != 2 || c.Retried != 1 || c.StaleRejections != 0 || c.OutcomesAbandoned != 0 {
			t.Errorf("counters %+v; want 1 retry, 2 completions", c)
		}
	})
}
