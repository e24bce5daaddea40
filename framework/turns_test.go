package framework_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A worker runs a key's events one after another without a claim
// statement for each: every completion takes the key's next event for the
// worker (lease.Store.WriteManyTakingTurns). With polling out of the way
// (an hour), the worker claims the head, and every later event reaches a
// handler through its predecessor's completion: the events run in order,
// and the claim statements number a few (the first, and at most one
// after a wakeup), not one per event.
func TestWorkerTakesTheTurnsOfTheKeysItFinishes(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const events = 30
		s := newStore(t, drv)
		batch := make([]lease.Event, events)
		for i := range batch {
			batch[i] = lease.Event{Kind: "k", Key: "chain", Payload: []byte(strconv.Itoa(i))}
		}
		pgtest.Enqueue(t, s, batch...)
		w := newWorker(t, s, framework.Config{PollInterval: time.Hour, Lease: time.Hour})
		var mu sync.Mutex
		var ran []int
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			n, err := strconv.Atoi(string(c.Payload))
			if err != nil {
				return leasework.Permanent(err)
			}
			mu.Lock()
			ran = append(ran, n)
			mu.Unlock()
			return nil
		})
		stop := start(t, w)
		waitFor(t, "every event of the key completed", func() bool { return w.Counters().Completed == events })
		stop()
		mu.Lock()
		defer mu.Unlock()
		for i, n := range ran {
			if n != i {
				t.Fatalf("the key's events ran in the order %v", ran)
			}
		}
		if c := w.Counters(); c.ClaimQueries > 3 {
			t.Errorf("%d claim statements for %d events of one key; the completions should have taken the turns", c.ClaimQueries, events)
		}
	})
}

// A large batch of completions that take their keys' turns goes out as
// two statements at once, and every key's order holds through it. The
// heads of 300 keys run together; their rows are held by a transaction of
// the test while they return, so that the writer's first statement waits
// and the other outcomes queue behind it; once the rows are let go, a
// batch of at least SplitFrom outcomes is written in two halves. Each
// key's three events run in order, never two at once, each once, and end
// DONE.
func TestLargeBatchTakingTurnsIsWrittenInTwo(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const keys, perKey = 300, 3
		ctx := context.Background()
		s := newStore(t, drv)
		for n := range perKey {
			batch := make([]lease.Event, keys)
			for k := range batch {
				batch[k] = lease.Event{Kind: "k", Key: fmt.Sprintf("key-%d", k), Payload: []byte(strconv.Itoa(n))}
			}
			pgtest.Enqueue(t, s, batch...)
		}
		w := newWorker(t, s, framework.Config{PollInterval: time.Hour, Lease: time.Hour, Concurrency: 1000})
		var mu sync.Mutex
		var splits []int
		framework.OnSplitWrite(w, func(n int) {
			mu.Lock()
			splits = append(splits, n)
			mu.Unlock()
		})
		running, ran := map[string]bool{}, map[string][]int{}
		var overlaps []string
		var started atomic.Int64
		gate := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			n, err := strconv.Atoi(string(c.Payload))
			if err != nil {
				return leasework.Permanent(err)
			}
			mu.Lock()
			if running[c.Key] {
				overlaps = append(overlaps, c.Key)
			}
			running[c.Key] = true
			ran[c.Key] = append(ran[c.Key], n)
			mu.Unlock()
			if started.Add(1) <= keys {
				<-gate // the heads return together
			}
			mu.Lock()
			running[c.Key] = false
			mu.Unlock()
			return nil
		})
		stop := start(t, w)
		waitFor(t, "every key's head running", func() bool { return started.Load() == keys })
		hold, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Rollback()
		table := ident(s.Schema()) + "." + ident(s.Table())
		if _, err := hold.ExecContext(ctx, "SELECT id FROM "+table+" WHERE status = 'INPROGRESS' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		close(gate)
		// The first statement takes what was queued when it began, and
		// waits for the rows: either it is large enough to be split, or
		// the rest is.
		waitFor(t, "a batch of at least SplitFrom outcomes", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(splits) > 0 || framework.QueuedOutcomes(w) >= framework.SplitFrom
		})
		if err := hold.Rollback(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == keys*perKey })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(splits) == 0 {
			t.Fatalf("no batch was written in two; at least one of %d outcomes was queued", framework.SplitFrom)
		}
		for _, n := range splits {
			if n < framework.SplitFrom {
				t.Errorf("a batch of %d outcomes was written in two; want at least %d", n, framework.SplitFrom)
			}
		}
		if len(overlaps) > 0 {
			t.Errorf("events of one key ran at once: %v", overlaps)
		}
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			if got := ran[key]; !slices.Equal(got, []int{0, 1, 2}) {
				t.Errorf("%s's events ran in the order %v; want [0 1 2]", key, got)
			}
		}
		var done int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE status = 'DONE'").Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done != keys*perKey {
			t.Errorf("%d rows DONE; want %d", done, keys*perKey)
		}
	})
}

// A stop waits for running handlers, and the slots a completion holds
// while it may take its key's turn count as running: when the write gives
// them back, the stop goes on at once, not at the end of its grace period
// (ten minutes here; Run used to wait all of it). The key has no next
// event, so the write takes no turn and gives its slot back. The event's
// row is held by the test while its handler returns, so that the
// completion waits with its slot held until the stop waits too.
func TestStopGoesOnWhenATurnTakingWriteGivesBackItsSlots(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := newStore(t, drv)
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "only", Key: "k1"})
		log := &messageLog{}
		w := newWorker(t, s, framework.Config{GracePeriod: 10 * time.Minute, PollInterval: time.Hour, Logger: slog.New(log)})
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			started <- struct{}{}
			<-release
			return nil
		})
		stop := start(t, w)
		recv(t, started, "the handler")

		hold, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Rollback()
		var one int
		if err := hold.QueryRowContext(ctx, "SELECT 1 FROM "+s.QualifiedTable()+" WHERE id = $1 FOR UPDATE", ids[0].ID).Scan(&one); err != nil {
			t.Fatal(err)
		}
		close(release)
		// pg_stat_activity keeps a statement's first 1024 bytes
		// (track_activity_query_size): the completion names take_turns
		// within them.
		waitFor(t, "the completion, taking its key's turn, waiting for the row", func() bool {
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%take_turns%'`).Scan(&n)
			return err == nil && n > 0
		})
		// stop fails the test if Run is not back within a minute; the
		// grace period is ten.
		stopped := make(chan struct{})
		go func() { defer close(stopped); stop() }()
		waitFor(t, "the worker stopping", func() bool { return log.count("worker stopping") > 0 })
		if err := hold.Rollback(); err != nil {
			t.Fatal(err)
		}
		recv(t, stopped, "Run's return")
		if r, err := s.Get(ctx, ids[0].ID); err != nil || r.Status != leasework.StatusDone {
			t.Errorf("the event: %+v, %v; want it DONE", r, err)
		}
	})
}

// A turn is a claim: a completion written after the worker began to stop
// takes none, and the key's next event is left READY, at its first
// generation, for the next claim, as the claim loop leaves its other
// events. The head's handler returns once the stop has begun; another
// handler, of an event without a key, runs on until the head's completion
// is written, so that the stop is still waiting for it then.
func TestStoppingWorkerTakesNoTurn(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := newStore(t, drv)
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "head", Key: "k1"}, lease.Event{Kind: "k", EventID: "next", Key: "k1"},
			lease.Event{Kind: "b", EventID: "busy"})
		log := &messageLog{}
		w := newWorker(t, s, framework.Config{GracePeriod: 10 * time.Minute, PollInterval: time.Hour, Logger: slog.New(log)})
		started := make(chan string, 3)
		release := map[string]chan struct{}{"k": make(chan struct{}), "b": make(chan struct{})}
		handler := func(ctx context.Context, c *leasework.Claim) error {
			started <- c.EventID
			<-release[c.Kind]
			return nil
		}
		register(t, w, "k", framework.RetryPolicy{}, handler)
		register(t, w, "b", framework.RetryPolicy{}, handler)
		stop := start(t, w)
		first := []string{recv(t, started, "a first handler"), recv(t, started, "a second handler")}
		slices.Sort(first)
		if !slices.Equal(first, []string{"busy", "head"}) {
			t.Fatalf("the handlers ran %v first; want busy and head", first)
		}
		stopped := make(chan struct{})
		go func() { defer close(stopped); stop() }()
		waitFor(t, "the worker stopping", func() bool { return log.count("worker stopping") > 0 })
		close(release["k"])
		waitFor(t, "the head DONE", func() bool {
			r, err := s.Get(ctx, ids[0].ID)
			return err == nil && r.Status == leasework.StatusDone
		})
		if r, err := s.Get(ctx, ids[1].ID); err != nil || r.Status != leasework.StatusReady || r.Generation != 0 {
			t.Errorf("the key's next event: %+v, %v; want it READY at generation 0, its turn not taken by a stopping worker", r, err)
		}
		close(release["b"])
		recv(t, stopped, "Run's return")
		if len(started) != 0 {
			t.Errorf("a handler started after the first two (%q); want none once the worker began to stop", <-started)
		}
	})
}
