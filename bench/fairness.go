package main

// The fairness section: the pickup of a small tenant's events beside a
// big tenant's backlog, in plain order, in a fair queue, and with the
// small tenant's events at a higher priority.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

func init() { addSection("fairness", fairness) }

const (
	fairHandler     = 2 * time.Millisecond // each event's handler: long enough that the backlog lasts
	fairConcurrency = 8
	// fairWait bounds the wait for the small tenant's last event after
	// its enqueue: in plain order, past the whole backlog on a slow
	// machine.
	fairWait = 5 * time.Minute
)

// fairMode is one way the queue is set up.
type fairMode struct {
	name  string
	setup func(ctx context.Context, s *lease.Store) error
	small int // the small tenant's events' priority
	big   int // the big tenant's
}

// fairness measures, for each mode, the pickup of a small tenant's events
// (from the start of each enqueue to the start of its handler), sent at a
// steady low rate while one worker works through a big tenant's backlog
// enqueued before it started.
func fairness(ctx context.Context, e *env) ([]table, error) {
	backlog, n := 20_000, 100
	if e.quick {
		backlog, n = 4_000, 30
	}
	modes := []fairMode{
		{name: "plain order (one queue, one priority)"},
		{name: "fair queue, weights 1 : 1", setup: func(ctx context.Context, s *lease.Store) error {
			_, err := s.SetWeight(ctx, lease.Weight{Weight: 1}, "bench")
			return err
		}},
		{name: "strict priority (the small tenant at 0, the big at 1)", small: 0, big: 1},
	}
	t := table{
		title:  "Fairness: pickup of a small tenant's events beside a big tenant's backlog (one pgx worker)",
		header: []string{"queue", "p50", "p99", "max", "backlog rows claimed meanwhile"},
	}
	for _, m := range modes {
		lat, behind, err := fairRun(ctx, e, m, backlog, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		e.logf("fairness: %s: p50 %v p99 %v", m.name, percentile(lat, 50), percentile(lat, 99))
		t.rows = append(t.rows, []string{m.name,
			fmt.Sprintf("%.1f ms", msOf(percentile(lat, 50))), fmt.Sprintf("%.1f ms", msOf(percentile(lat, 99))),
			fmt.Sprintf("%.1f ms", msOf(percentile(lat, 100))), thousands(float64(behind))})
	}
	t.notes = append(t.notes,
		fmt.Sprintf("Each mode: a fresh table; %s events of the big tenant (partition big) enqueued first; then one worker (framework, pgx, Concurrency %d, handlers of %v) starts, and %d events of the small tenant (partition small) are enqueued one a transaction at %d a second on average; pickup is from the start of each enqueue to the start of its handler.",
			thousands(float64(backlog)), fairConcurrency, fairHandler, n, pickupRate),
		"In plain order the small tenant's events wait behind the backlog. A fair queue takes both partitions in turn; strict priority takes the small tenant's first, which it would do for any tenant given the higher priority.")
	return []table{t}, nil
}

// fairRun runs one mode and returns the small tenant's pickups and how
// many rows of the backlog were claimed meanwhile.
func fairRun(ctx context.Context, e *env, m fairMode, backlog, n int) ([]time.Duration, int64, error) {
	drv := pgxdriver.New()
	db, err := drv.Open(e.dsn)
	if err != nil {
		return nil, 0, err
	}
	defer db.Close()
	s, err := lease.New(db, drv, lease.Options{Schema: freshSchema("lwfair")})
	if err != nil {
		return nil, 0, err
	}
	if _, err := s.Migrate(ctx); err != nil {
		return nil, 0, err
	}
	defer func() {
		if err := s.DropSchema(context.Background()); err != nil {
			e.logf("drop schema %s: %v", s.Schema(), err)
		}
	}()
	if m.setup != nil {
		if err := m.setup(ctx, s); err != nil {
			return nil, 0, err
		}
	}
	for lo := 0; lo < backlog; lo += 1000 {
		events := make([]lease.Event, 0, 1000)
		for i := lo; i < min(lo+1000, backlog); i++ {
			events = append(events, lease.Event{Kind: benchKind, Partition: "big", Priority: m.big, Payload: []byte("big")})
		}
		if err := enqueueCommitted(ctx, db, s, events); err != nil {
			return nil, 0, err
		}
	}
	cfg := lwShape{}.config(s.Schema())
	cfg.Concurrency = fairConcurrency
	w, err := framework.New(db, drv, cfg)
	if err != nil {
		return nil, 0, err
	}
	clock := newPickupClock(n)
	clock.wait = fairWait // in plain order, the last event waits for the whole backlog
	var big atomic.Int64
	err = w.Register(benchKind, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if string(c.Payload) == "big" {
			big.Add(1)
		} else {
			i, _ := strconv.ParseInt(string(c.Payload), 10, 64)
			clock.started(i)
		}
		time.Sleep(fairHandler)
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		return nil, 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { w.Run(runCtx); close(stopped) }()
	defer func() { stop(); <-stopped }()
	lat, err := clock.send(ctx, n, func(i int64) error {
		return enqueueCommitted(ctx, db, s, []lease.Event{{Kind: benchKind, Partition: "small", Priority: m.small, Payload: strconv.AppendInt(nil, i, 10)}})
	})
	return lat, big.Load(), err
}

// enqueueCommitted enqueues events in a transaction of their own.
func enqueueCommitted(ctx context.Context, db *sql.DB, s *lease.Store, events []lease.Event) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
