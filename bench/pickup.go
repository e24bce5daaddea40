package main

// The pickup section: how long an idle system takes to start the handler of
// an event arriving at a steady low rate, from the start of the transaction
// that enqueues it.

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

const (
	pickupRate   = 20 // events per second, on average
	pickupEvents = 200
	pickupQuick  = 40

	// pickupWarmup is how long a system runs before its first event, and
	// pickupWarmupEvents how many events it then handles unmeasured: its
	// listener is connected and its first claims made by then.
	pickupWarmup       = time.Second
	pickupWarmupEvents = 5

	// pickupWait bounds the wait for the last handler after the last
	// enqueue: well past a 1s poll.
	pickupWait = 30 * time.Second
)

// pollOnlyDriver hides a driver's optional capabilities (its
// leasework.Notifier), leaving the worker to poll.
type pollOnlyDriver struct{ leasework.Driver }

// pickupRunner sends n events at pickupRate to one system and returns each
// one's latency from the start of its enqueue to the start of its handler.
type pickupRunner func(ctx context.Context, e *env, n int) ([]time.Duration, error)

// pickupClock stamps events: begin[i] is event i's enqueue start, as an
// offset from base (monotonic); handlers read it back by the event's
// number.
type pickupClock struct {
	base    time.Time
	begin   []atomic.Int64
	latency chan time.Duration
	wait    time.Duration // bounds the wait for the last handler after the last enqueue; zero: pickupWait
}

func newPickupClock(n int) *pickupClock {
	return &pickupClock{base: time.Now(), begin: make([]atomic.Int64, n), latency: make(chan time.Duration, n)}
}

// started is called by a handler of event i.
func (c *pickupClock) started(i int64) {
	if i < 0 || i >= int64(len(c.begin)) {
		return // a warm-up event
	}
	c.latency <- time.Since(c.base) - time.Duration(c.begin[i].Load())
}

// send enqueues n events with enqueue(i), each at a random phase: the gaps
// are uniform between 0 and twice the mean gap. It returns the latencies
// the handlers reported.
func (c *pickupClock) send(ctx context.Context, n int, enqueue func(i int64) error) ([]time.Duration, error) {
	gap := time.Second / pickupRate
	for i := range n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(rand.N(2 * gap)):
		}
		c.begin[i].Store(int64(time.Since(c.base)))
		if err := enqueue(int64(i)); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, n)
	wait := cmp.Or(c.wait, pickupWait)
	deadline := time.After(wait)
	for len(out) < n {
		select {
		case d := <-c.latency:
			out = append(out, d)
		case <-deadline:
			return nil, fmt.Errorf("%d of %d events picked up %v after the last enqueue", len(out), n, wait)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// warmUp waits pickupWarmup, then sends pickupWarmupEvents unmeasured
// events (numbered from -1 down) and waits for each to be handled.
func warmUp(ctx context.Context, enqueue func(i int64) error, handled <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pickupWarmup):
	}
	for i := range pickupWarmupEvents {
		if err := enqueue(int64(-1 - i)); err != nil {
			return err
		}
		select {
		case <-handled:
		case <-time.After(pickupWait):
			return fmt.Errorf("warm-up event not handled within %v", pickupWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// pickupLeasework measures a pgx worker at its default configuration,
// woken by LISTEN/NOTIFY, or polling only when poll is set.
func pickupLeasework(poll bool) pickupRunner {
	return func(ctx context.Context, e *env, n int) ([]time.Duration, error) {
		var drv leasework.Driver = pgxdriver.New()
		if poll {
			drv = pollOnlyDriver{drv}
		}
		db, err := drv.Open(e.dsn)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		s, err := lease.New(db, drv, lease.Options{Schema: freshSchema("lwpick")})
		if err != nil {
			return nil, err
		}
		if _, err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		defer func() {
			if err := s.DropSchema(context.Background()); err != nil {
				e.logf("drop schema %s: %v", s.Schema(), err)
			}
		}()
		w, err := framework.New(db, drv, lwShape{}.config(s.Schema()))
		if err != nil {
			return nil, err
		}
		clock := newPickupClock(n)
		warm := make(chan struct{}, pickupWarmupEvents)
		err = w.Register(benchKind, leasework.HandlerFunc(func(_ context.Context, c *leasework.Claim) error {
			i, _ := strconv.ParseInt(string(c.Payload), 10, 64)
			if i < 0 {
				warm <- struct{}{}
			}
			clock.started(i)
			return nil
		}), framework.RetryPolicy{})
		if err != nil {
			return nil, err
		}
		enqueue := func(i int64) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: benchKind, Payload: strconv.AppendInt(nil, i, 10)}); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
		runCtx, stop := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() { w.Run(runCtx); close(stopped) }()
		defer func() { stop(); <-stopped }()
		if err := warmUp(ctx, enqueue, warm); err != nil {
			return nil, err
		}
		return clock.send(ctx, n, enqueue)
	}
}

// pickupRiver measures a River client through riverpgxv5 with the
// settings.
func pickupRiver(settings riverSettings) pickupRunner {
	return func(ctx context.Context, e *env, n int) (_ []time.Duration, err error) {
		schema := freshSchema("riverpick")
		defer func() {
			if err := dropRiverSchema(context.Background(), e.dsn, schema); err != nil {
				e.logf("drop schema %s: %v", schema, err)
			}
		}()
		if err := migrateRiver(ctx, e.dsn, schema); err != nil {
			return nil, err
		}
		clock := newPickupClock(n)
		warm := make(chan struct{}, pickupWarmupEvents)
		c, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{
			Settings: settings,
			Work: func(_ context.Context, job *river.Job[riverArgs]) error {
				if job.Args.Num < 0 {
					warm <- struct{}{}
				}
				clock.started(job.Args.Num)
				return nil
			},
		})
		if err != nil {
			return nil, err
		}
		defer func() {
			if stopErr := c.Stop(context.Background()); err == nil && stopErr != nil {
				err = fmt.Errorf("river stop: %w", stopErr)
			}
		}()
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		// InsertOne is one InsertMany: a transaction of its own.
		enqueue := func(i int64) error { return c.InsertOne(ctx, riverArgs{Num: i}) }
		if err := warmUp(ctx, enqueue, warm); err != nil {
			return nil, err
		}
		return clock.send(ctx, n, enqueue)
	}
}

func init() { addSection("pickup", pickup) }

func pickup(ctx context.Context, e *env) ([]table, error) {
	n := pickupEvents
	if e.quick {
		n = pickupQuick
	}
	rounds := min(e.rounds, n)
	systems := []struct {
		label, config string
		run           pickupRunner
	}{
		{"leasework pgx, LISTEN/NOTIFY", "defaults", pickupLeasework(false)},
		{"leasework pgx, polling only", fmt.Sprintf("defaults (PollInterval %v)", framework.DefaultPollInterval), pickupLeasework(true)},
		{"River pgx, bench settings", fmt.Sprintf("FetchCooldown %v, FetchPollInterval %v", riverBench.fetchCooldown, riverBench.fetchPollInterval), pickupRiver(riverBench)},
		{"River pgx, defaults", "FetchCooldown 100ms, FetchPollInterval 1s (River's defaults)", pickupRiver(riverDefaults)},
	}
	latencies := make([][]time.Duration, len(systems))
	for round := range rounds {
		// Events split over the rounds; each round starts at another system.
		per := n / rounds
		if round < n%rounds {
			per++
		}
		for k := range systems {
			i := (k + round) % len(systems)
			ds, err := systems[i].run(ctx, e, per)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", systems[i].label, err)
			}
			e.logf("pickup round %d: %s: p50 %s", round+1, systems[i].label, ms(percentile(ds, 50)))
			latencies[i] = append(latencies[i], ds...)
		}
	}
	t := table{
		title:  "Pickup latency at a steady low rate, from the start of the enqueuing transaction to the handler's start",
		header: []string{"system", "configuration", "events", "p50", "p99"},
	}
	for i, s := range systems {
		ds := latencies[i]
		t.rows = append(t.rows, []string{s.label, s.config, fmt.Sprint(len(ds)), ms(percentile(ds, 50)), ms(percentile(ds, 99))})
	}
	t.notes = append(t.notes,
		fmt.Sprintf("%d events per system at %d/s on average, each in a committed transaction of its own, the gaps uniform between 0 and %v (a random phase against any poll cycle); split over %d rounds, each round starting at another system",
			n, pickupRate, 2*time.Second/pickupRate, rounds),
		fmt.Sprintf("each system idles %v and handles %d unmeasured events first, so that its listener is up", pickupWarmup, pickupWarmupEvents),
		"leasework: framework.Config with only Schema and Logger set; polling only hides the driver's leasework.Notifier; River: riverpgxv5 with LISTEN/NOTIFY, River's default worker count is none, 100 used with its defaults, 2,000 with its bench settings",
		"percentiles by nearest rank",
	)
	if e.quick {
		t.notes = append(t.notes, "-quick: few events, p99 is about the maximum")
	}
	return []table{t}, nil
}
