package pgx_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// statuses returns the status of each row id, in the order given.
func statuses(t *testing.T, s *lease.Store, ids ...int64) []leasework.Status {
	t.Helper()
	out := make([]leasework.Status, len(ids))
	for i, id := range ids {
		r, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r.Status
	}
	return out
}

// Keyed events enqueued in a pgx transaction are put in line as those of
// Store.Enqueue are, whichever driver the store uses: inserted in key order
// and in the order given within a key, only each key's first event READY,
// the next promoted when it completes. Both ways (INSERT, COPY).
func TestEnqueueKeyedInPgxTxWaitsBehindItsHead(t *testing.T) {
	eachWay(t, func(t *testing.T, copyMin int) {
		pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) { testEnqueueKeyedInPgxTxWaitsBehindItsHead(t, drv, copyMin) })
	})
}

func testEnqueueKeyedInPgxTxWaitsBehindItsHead(t *testing.T, drv leasework.Driver, copyMin int) {
	ctx := context.Background()
	s := pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: copyMin})
	pool := newPool(t)
	tx := begin(t, pool)
	out, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{Kind: "k", Key: "b", EventID: "b0"}, lease.Event{Kind: "k", Key: "a", EventID: "a0"},
		lease.Event{Kind: "k", Key: "b", EventID: "b1"}, lease.Event{Kind: "k", Key: "a", EventID: "a1"},
		lease.Event{Kind: "k", EventID: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b0, a0, b1, a1, none := out[0].ID, out[1].ID, out[2].ID, out[3].ID, out[4].ID
	if !(none < a0 && a0 < a1 && a1 < b0 && b0 < b1) {
		t.Errorf("ids none %d, a %d %d, b %d %d; want them inserted in key order (none first), in the order given within a key",
			none, a0, a1, b0, b1)
	}
	want := []leasework.Status{"READY", "READY", "WAITING", "WAITING", "READY"}
	if got := statuses(t, s, a0, b0, a1, b1, none); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a0 b0 a1 b1 none = %v; want %v", got, want)
	}
	cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Worker: "w"})
	if err != nil || len(cs) != 3 {
		t.Fatalf("claimed %+v, %v; want the two heads and the keyless event", cs, err)
	}
	for _, c := range cs {
		if c.Key == "a" {
			if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
				t.Fatal(err)
			}
		}
	}
	want = []leasework.Status{"DONE", "INPROGRESS", "READY", "WAITING"}
	if got := statuses(t, s, a0, b0, a1, b1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a0 b0 a1 b1 after a0 completed = %v; want %v", got, want)
	}
}

// Enqueuers through pgx transactions and through database/sql ones, at
// the same time, each giving the same keys in a shuffled order: no enqueue
// deadlocks (both take their keys' commit-time locks in key order, through
// the one statement), and a worker handles each key's events one at a
// time, each enqueuer's in the order it committed them. Both ways: with
// COPY, the pgx transactions copy, and so do the store's through lib/pq.
func TestEnqueueKeyedInPgxTxBesideStoreEnqueue(t *testing.T) {
	eachWay(t, func(t *testing.T, copyMin int) {
		pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) { testEnqueueKeyedInPgxTxBesideStoreEnqueue(t, drv, copyMin) })
	})
}

func testEnqueueKeyedInPgxTxBesideStoreEnqueue(t *testing.T, drv leasework.Driver, copyMin int) {
	const nkeys, enqueuers, rounds = 6, 4, 15
	ctx := context.Background()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	s := pgtest.Store(t, drv, lease.Options{EnqueueCopyMin: copyMin})
	pool := newPool(t)
	keys := make([]string, nkeys)
	for k := range keys {
		keys[k] = fmt.Sprintf("agg-%02d", k)
	}
	pgtest.EnqueueShuffled(t, seed, keys, enqueuers, rounds, func(g int, events []lease.Event) error {
		if g%2 == 0 {
			return enqueuePgx(ctx, s, pool, events)
		}
		_, err := pgtest.EnqueueCommitted(ctx, s, events...)
		return err
	})

	w, err := framework.New(s.DB(), s.Driver(), framework.Config{
		Schema: s.Schema(), Concurrency: 8, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := map[string]bool{}
	handled := map[string][]string{}
	overlaps := 0
	if err := w.Register("k", leasework.HandlerFunc(func(_ context.Context, c *leasework.Claim) error {
		mu.Lock()
		if running[c.Key] {
			overlaps++
		}
		running[c.Key] = true
		handled[c.Key] = append(handled[c.Key], string(c.Payload))
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[c.Key] = false
			mu.Unlock()
		}()
		return nil
	}), framework.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	total := int64(nkeys * enqueuers * rounds)
	deadline := time.Now().Add(30 * time.Second)
	for w.Counters().Completed != total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if c := w.Counters(); c.Completed != total || c.OutcomesAbandoned != 0 {
		t.Fatalf("counters %+v; want %d completed, nothing abandoned", c, total)
	}

	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d times a key's handler started while another of its events was being handled", overlaps)
	}
	for _, k := range keys {
		next := make([]int, enqueuers)
		for _, p := range handled[k] {
			var g, i int
			if _, err := fmt.Sscanf(p, "%d:%d", &g, &i); err != nil {
				t.Fatal(err)
			}
			if i != next[g] {
				t.Errorf("key %s: enqueuer %d's round %d handled when %d was next", k, g, i, next[g])
			}
			next[g] = i + 1
		}
		if len(handled[k]) != enqueuers*rounds {
			t.Errorf("key %s: %d events handled; want %d", k, len(handled[k]), enqueuers*rounds)
		}
	}
}

// enqueuePgx enqueues events in a pgx transaction of their own.
func enqueuePgx(ctx context.Context, s *lease.Store, pool *pgxpool.Pool, events []lease.Event) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), lease.EnqueueOptions{}, events...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
