package main

// The pressure section: each system under a steady producer while the
// server is made to suffer the way a shared database does. Phases of a
// fixed length follow each other without a pause: clean, then a stress
// (an idle transaction pinning the xmin horizon; REPEATABLE READ readers
// scanning the events table; the producer at 1.5× its rate), then recovery
// with the stress gone, for each stress in turn. One system at a time, each
// on a schema of its own on the same server.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

const (
	// pressureDefaultRate is the producer's rate, events per second, when
	// -pressure-rate is not given; pressureQuickRate caps it with -quick.
	pressureDefaultRate = 800
	pressureQuickRate   = 200
	// pressureDefaultPhase is each phase's length when -pressure-phase is
	// not given; pressureQuickPhase is it with -quick.
	pressureDefaultPhase = 2 * time.Minute
	pressureQuickPhase   = time.Second

	pressureHandlerSleep = time.Millisecond // what each handler does
	pressureTick         = 10 * time.Millisecond
	pressureMaxBatch     = 5000 // the most events one producer transaction carries
	pressureReaders      = 4    // REPEATABLE READ readers of that phase
	pressureOverload     = 1.5  // the producer's rate in the overload phase, × the rate

	// pressureDrain bounds the wait, after the last phase, for every
	// produced event to finish.
	pressureDrain = 5 * time.Minute
)

// phaseRole is what a phase is for in the goal columns.
type phaseRole int

const (
	roleClean phaseRole = iota
	roleStress
	roleRecovery
)

// pressurePhase is one phase of the sequence.
type pressurePhase struct {
	name string
	role phaseRole
	rate float64 // × the producer's rate
	// stress starts the phase's load on the server against the events
	// table; the function it returns ends it. nil: none.
	stress func(ctx context.Context, dsn, table string) (func() error, error)
}

// pressurePhases returns the sequence. With -quick the clean phase before
// the second and third stress is left out: the recovery before it stands
// for it.
func pressurePhases(quick bool) []pressurePhase {
	clean := pressurePhase{name: "clean", role: roleClean, rate: 1}
	recovery := pressurePhase{name: "recovery", role: roleRecovery, rate: 1}
	stresses := []pressurePhase{
		{name: "idle in transaction", role: roleStress, rate: 1, stress: idleInTransaction},
		{name: fmt.Sprintf("%d REPEATABLE READ readers", pressureReaders), role: roleStress, rate: 1, stress: repeatableReaders},
		{name: fmt.Sprintf("overload %.1f×", pressureOverload), role: roleStress, rate: pressureOverload},
	}
	var out []pressurePhase
	for i, s := range stresses {
		if i == 0 || !quick {
			out = append(out, clean)
		}
		out = append(out, s, recovery)
	}
	return out
}

// idleInTransaction opens a transaction that takes a transaction id and
// then sits idle, on a connection of its own, until the phase ends.
func idleInTransaction(ctx context.Context, dsn, _ string) (func() error, error) {
	db, err := openDB(ctx, "pgx", dsn)
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	var xid int64
	if err := tx.QueryRowContext(ctx, "SELECT /* bench */ txid_current()").Scan(&xid); err != nil {
		tx.Rollback()
		db.Close()
		return nil, err
	}
	return func() error {
		err := tx.Rollback()
		db.Close()
		return err
	}, nil
}

// repeatableReaders starts pressureReaders readers, each in one REPEATABLE
// READ transaction held open for the phase, scanning the whole table again
// and again.
func repeatableReaders(ctx context.Context, dsn, table string) (func() error, error) {
	db, err := openDB(ctx, "pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(pressureReaders)
	rctx, cancel := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		errs = make([]error, pressureReaders)
	)
	query := "SELECT /* bench */ count(*), coalesce(sum(length(kind)), 0) FROM " + table
	for i := range pressureReaders {
		wg.Go(func() {
			tx, err := db.BeginTx(rctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback()
			for rctx.Err() == nil {
				var n, sum int64
				if err := tx.QueryRowContext(rctx, query).Scan(&n, &sum); err != nil {
					if rctx.Err() == nil {
						errs[i] = err
					}
					return
				}
			}
		})
	}
	return func() error {
		cancel()
		wg.Wait()
		db.Close()
		return errors.Join(errs...)
	}, nil
}

// pressureClock stamps events by sequence number, as offsets from base:
// committed[i] once the producer's transaction holding event i has
// committed, started[i] when its handler starts (the first time).
type pressureClock struct {
	base      time.Time
	committed []atomic.Int64
	started   []atomic.Int64
	handled   atomic.Int64 // handler calls returned
}

func (c *pressureClock) now() int64 { return int64(time.Since(c.base)) + 1 } // never 0: 0 is "not yet"

// handle is every handler's body for event i.
func (c *pressureClock) handle(ctx context.Context, i int64) {
	if i >= 0 && i < int64(len(c.started)) {
		c.started[i].CompareAndSwap(0, c.now())
	}
	select {
	case <-time.After(pressureHandlerSleep):
	case <-ctx.Done():
	}
	c.handled.Add(1)
}

// latencies returns the pickup latencies of events [from, to): from the
// commit to the handler's start, zero when the handler started before the
// producer saw its commit return.
func (c *pressureClock) latencies(from, to int64) []time.Duration {
	out := make([]time.Duration, 0, max(to-from, 0))
	for i := from; i < to; i++ {
		s, k := c.started[i].Load(), c.committed[i].Load()
		if s == 0 || k == 0 {
			continue
		}
		out = append(out, time.Duration(max(s-k, 0)))
	}
	return out
}

// pressureTarget is one system as the section drives it.
type pressureTarget struct {
	label, config string
	schema, table string // the events table: its schema and name, unquoted
	probe         *sql.DB
	// enqueue commits events [first, first+n) in one transaction.
	enqueue func(ctx context.Context, first int64, n int) error
	// depth counts rows not finished; finished counts finished ones.
	depth, finished func(ctx context.Context) (int64, error)
	// claimTime samples the claim statement's execution time, as the
	// worker runs it most of the time (from its floor) and from the oldest
	// READY row; nil when the system has none to sample.
	claimTime func(ctx context.Context) (floored, full time.Duration, err error)
	stop      func() error
}

func (t *pressureTarget) qualified() string {
	return lease.QuoteIdent(t.schema) + "." + lease.QuoteIdent(t.table)
}

// pressureRow is one phase's figures.
type pressureRow struct {
	phase        pressurePhase
	elapsed      time.Duration
	enqueued     int64
	completed    int64
	p50, p99     time.Duration
	picked       int   // events of the phase whose pickup was timed
	first, end   int64 // the phase's events: sequence numbers [first, end)
	depth        int64
	deadTuples   int64
	totalBytes   int64
	indexBytes   int64
	claimTime    time.Duration // from the worker's floor
	claimFull    time.Duration // from the oldest
	claimTimeErr string        // why claimTime is missing: "" when it is there
}

func (r pressureRow) rate() float64 { return float64(r.completed) / r.elapsed.Seconds() }

// pressureRun is one system's run.
type pressureRun struct {
	label, config string
	rows          []pressureRow
	enqueued      int64 // in all
	finished      int64 // as the table shows after the drain
}

// pressureSettings returns the producer's rate and the phases' length.
func pressureSettings(e *env) (float64, time.Duration) {
	rate, phase := float64(e.pressureRate), e.pressurePhase
	if rate <= 0 {
		rate = pressureDefaultRate
	}
	if phase <= 0 {
		phase = pressureDefaultPhase
		if e.quick {
			phase = pressureQuickPhase
		}
	}
	if e.quick && !e.pressureRateSet {
		rate = min(rate, pressureQuickRate)
	}
	return rate, phase
}

// runPressure runs the phases through one system: it produces at the
// phase's rate, ends each phase with its measurements, then drains and
// counts the finished rows.
func runPressure(ctx context.Context, e *env, open func(ctx context.Context, e *env, clock *pressureClock) (*pressureTarget, error)) (pressureRun, error) {
	rate, phaseLen := pressureSettings(e)
	phases := pressurePhases(e.quick)
	var capacity float64
	for _, p := range phases {
		capacity += rate * p.rate * phaseLen.Seconds()
	}
	clock := &pressureClock{base: time.Now()}
	n := int(capacity*1.1) + 10000
	clock.committed, clock.started = make([]atomic.Int64, n), make([]atomic.Int64, n)
	t, err := open(ctx, e, clock)
	if err != nil {
		return pressureRun{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			t.stop()
		}
	}()
	run := pressureRun{label: t.label, config: t.config}

	// The producer: every tick, the events due at the current rate since
	// the last, in one transaction.
	var (
		rateBits atomic.Uint64
		seq      atomic.Int64
		prodErr  error
		prodWG   sync.WaitGroup
	)
	rateBits.Store(math.Float64bits(rate * phases[0].rate))
	pctx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	prodWG.Go(func() {
		tick := time.NewTicker(pressureTick)
		defer tick.Stop()
		last, due := time.Now(), 0.0
		for {
			select {
			case <-pctx.Done():
				return
			case now := <-tick.C:
				due += math.Float64frombits(rateBits.Load()) * now.Sub(last).Seconds()
				last = now
			}
			k := min(int(due), pressureMaxBatch, n-int(seq.Load()))
			if k <= 0 {
				continue
			}
			due -= float64(k)
			first := seq.Load()
			// On ctx, not pctx: a transaction under way when the producer
			// is stopped commits and is counted, never lost in between.
			if err := t.enqueue(ctx, first, k); err != nil {
				prodErr = err
				return
			}
			at := clock.now()
			for i := first; i < first+int64(k); i++ {
				clock.committed[i].Store(at)
			}
			seq.Add(int64(k))
		}
	})
	stopProducerNow := func() error {
		stopProducer()
		prodWG.Wait()
		return prodErr
	}

	// Phases are contiguous: each begins where the last ended, so that
	// every event and every completion falls in exactly one; a phase's
	// time includes the start of its stress and the previous phase's
	// measurements.
	begin, seq0, done0 := time.Now(), int64(0), int64(0)
	for k, p := range phases {
		rateBits.Store(math.Float64bits(rate * p.rate))
		var end func() error
		if p.stress != nil {
			if end, err = p.stress(ctx, e.dsn, t.qualified()); err != nil {
				stopProducerNow()
				return run, fmt.Errorf("%s: %w", p.name, err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(phaseLen):
		}
		if k == len(phases)-1 {
			stopProducerNow() // its error is read below; nothing is enqueued past the last phase
		}
		now, seq1, done1 := time.Now(), seq.Load(), clock.handled.Load()
		row := pressureRow{phase: p, elapsed: now.Sub(begin), enqueued: seq1 - seq0, completed: done1 - done0, first: seq0, end: seq1}
		begin, seq0, done0 = now, seq1, done1
		measureErr := measurePhase(ctx, t, &row)
		if end != nil {
			if err := end(); err != nil && ctx.Err() == nil {
				stopProducerNow()
				return run, fmt.Errorf("%s: ending the stress: %w", p.name, err)
			}
		}
		if err := cmpErr(ctx.Err(), measureErr); err != nil {
			stopProducerNow()
			return run, fmt.Errorf("%s: %w", p.name, err)
		}
		// The latencies are read after the drain: an event of this phase
		// may be picked up in a later one.
		run.rows = append(run.rows, row)
		e.logf("pressure: %s: %s: %s enqueued, %s finished/s, depth %s", t.label, p.name,
			thousands(float64(row.enqueued)), thousands(row.rate()), thousands(float64(row.depth)))
	}
	if err := stopProducerNow(); err != nil {
		return run, fmt.Errorf("producer: %w", err)
	}
	run.enqueued = seq.Load()
	dctx, cancel := context.WithTimeout(ctx, pressureDrain)
	defer cancel()
	err = waitCount(dctx, run.enqueued, func() (int64, error) { return clock.handled.Load(), nil })
	if err == nil {
		err = waitCount(dctx, run.enqueued, func() (int64, error) { return t.finished(dctx) })
	}
	if err != nil {
		return run, fmt.Errorf("drain: %w", err)
	}
	if run.finished, err = t.finished(ctx); err != nil {
		return run, err
	}
	stopped = true
	if err := t.stop(); err != nil {
		return run, err
	}
	for i := range run.rows {
		r := &run.rows[i]
		ds := clock.latencies(r.first, r.end)
		r.picked, r.p50, r.p99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	}
	return run, nil
}

// measurePhase reads the table's figures at a phase's end, the stress
// still on.
func measurePhase(ctx context.Context, t *pressureTarget, r *pressureRow) error {
	var err error
	if r.depth, err = t.depth(ctx); err != nil {
		return fmt.Errorf("queue depth: %w", err)
	}
	if t.claimTime != nil {
		floored, full, err := t.claimTime(ctx)
		if err != nil {
			r.claimTimeErr = err.Error()
		}
		r.claimTime, r.claimFull = floored, full
	} else {
		r.claimTimeErr = "n/a"
	}
	if _, err := t.probe.ExecContext(ctx, "SELECT /* bench */ pg_stat_clear_snapshot()"); err != nil {
		return err
	}
	err = t.probe.QueryRowContext(ctx, `SELECT /* bench */ coalesce(s.n_dead_tup, 0), pg_total_relation_size(c.oid), pg_indexes_size(c.oid)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relname = $2`, t.schema, t.table).Scan(&r.deadTuples, &r.totalBytes, &r.indexBytes)
	if err != nil {
		return fmt.Errorf("table statistics: %w", err)
	}
	return nil
}

// executionTime reads "Execution Time: 0.123 ms" from an EXPLAIN ANALYZE
// plan.
func executionTime(plan string) (time.Duration, error) {
	for _, line := range strings.Split(plan, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "Execution Time:")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "ms")), 64)
		if err != nil {
			return 0, fmt.Errorf("execution time %q: %w", v, err)
		}
		return time.Duration(f * float64(time.Millisecond)), nil
	}
	return 0, errors.New("no execution time in the plan")
}

// openLeaseworkPressure starts a pgx worker at its defaults on a fresh
// table.
func openLeaseworkPressure(ctx context.Context, e *env, clock *pressureClock) (_ *pressureTarget, err error) {
	tbl, err := newLWTable(ctx, e, "pgx", lwShape{}, 0)
	if err != nil {
		return nil, err
	}
	probe, err := openDB(ctx, "pgx", e.dsn)
	if err != nil {
		tbl.close(e)
		return nil, err
	}
	defer func() {
		if err != nil {
			probe.Close()
			tbl.close(e)
		}
	}()
	s := tbl.store
	w, err := framework.New(tbl.dbs[0], tbl.drv, lwShape{}.config(s.Schema()))
	if err != nil {
		return nil, err
	}
	err = w.Register(benchKind, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		i, _ := strconv.ParseInt(string(c.Payload), 10, 64)
		clock.handle(ctx, i)
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	running := make(chan struct{})
	go func() { w.Run(runCtx); close(running) }()
	statuses := func(ctx context.Context, query string, args ...any) (int64, error) {
		var n int64
		err := probe.QueryRowContext(ctx, query, args...).Scan(&n)
		return n, err
	}
	return &pressureTarget{
		label:  "leasework pgx",
		config: "defaults: " + lwShape{}.String(),
		schema: s.Schema(), table: s.Table(),
		probe: probe,
		enqueue: func(ctx context.Context, first int64, n int) error {
			events := make([]lease.Event, n)
			for j := range events {
				events[j] = lease.Event{Kind: benchKind, Payload: strconv.AppendInt(nil, first+int64(j), 10)}
			}
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := s.Enqueue(ctx, tx, events...); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		depth: func(ctx context.Context) (int64, error) {
			return statuses(ctx, "SELECT /* bench */ count(*) FROM "+s.QualifiedTable()+" WHERE status IN ($1, $2)", "READY", "INPROGRESS")
		},
		finished: func(ctx context.Context) (int64, error) {
			return statuses(ctx, "SELECT /* bench */ count(*) FROM "+s.QualifiedTable()+" WHERE status = $1", "DONE")
		},
		claimTime: func(ctx context.Context) (floored, full time.Duration, err error) {
			// The worker's floors (framework/floor.go): a second before
			// the due time of the row it finished last (every event has
			// priority 0 here), and for expired leases a second before
			// the clock of its last claim, which found none expired.
			var last, now time.Time
			err = probe.QueryRowContext(ctx, "SELECT /* bench */ next_attempt_at, statement_timestamp() FROM "+s.QualifiedTable()+
				" WHERE status = 'DONE' ORDER BY finished_at DESC LIMIT 1").Scan(&last, &now)
			if err != nil {
				return 0, 0, fmt.Errorf("the last finished row: %w", err)
			}
			explain := func(from []time.Time, leaseFrom time.Time) (time.Duration, error) {
				plan, err := s.ExplainClaim(ctx, lease.ClaimRequest{
					Limit: framework.DefaultConcurrency, Lease: time.Minute, Kinds: []string{benchKind}, Worker: "bench-explain",
					DueFrom: from, ExpiredFrom: leaseFrom,
				})
				if err != nil {
					return 0, err
				}
				return executionTime(plan)
			}
			if floored, err = explain([]time.Time{last.Add(-time.Second)}, now.Add(-time.Second)); err != nil {
				return 0, 0, err
			}
			full, err = explain(nil, time.Time{})
			return floored, full, err
		},
		stop: func() error {
			stop()
			<-running
			probe.Close()
			tbl.close(e)
			return nil
		},
	}, nil
}

// openRiverPressure starts a River pgx client at River's defaults on a
// fresh schema.
func openRiverPressure(ctx context.Context, e *env, clock *pressureClock) (_ *pressureTarget, err error) {
	schema, drop, err := freshRiverSchema(ctx, e, "riverpress")
	if err != nil {
		return nil, err
	}
	c, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{
		Settings: riverDefaults,
		Work: func(ctx context.Context, job *river.Job[riverArgs]) error {
			clock.handle(ctx, job.Args.Num)
			return nil
		},
	})
	if err != nil {
		drop()
		return nil, err
	}
	// The figures are read on a pool of their own, as leasework's are,
	// not on the client's.
	probe, err := openDB(ctx, "pgx", e.dsn)
	if err != nil {
		c.Stop(context.Background())
		drop()
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		probe.Close()
		c.Stop(context.Background())
		drop()
		return nil, err
	}
	count := func(ctx context.Context, query string, args ...any) (int64, error) {
		var n int64
		err := probe.QueryRowContext(ctx, query, args...).Scan(&n)
		return n, err
	}
	table := lease.QuoteIdent(schema) + ".river_job"
	return &pressureTarget{
		label:  "River pgx",
		config: fmt.Sprintf("defaults: %d workers, FetchCooldown 100ms, FetchPollInterval 1s", riverDefaults.maxWorkers),
		schema: schema, table: "river_job",
		probe: probe,
		enqueue: func(ctx context.Context, first int64, n int) error {
			params := make([]river.InsertManyParams, n)
			for j := range params {
				params[j] = river.InsertManyParams{Args: riverArgs{Num: first + int64(j)}}
			}
			return c.insert(ctx, params)
		},
		depth: func(ctx context.Context) (int64, error) {
			return count(ctx, "SELECT /* bench */ count(*) FROM "+table+" WHERE state NOT IN ($1, $2, $3)", "completed", "cancelled", "discarded")
		},
		finished: func(ctx context.Context) (int64, error) {
			return count(ctx, "SELECT /* bench */ count(*) FROM "+table+" WHERE state = $1", "completed")
		},
		stop: func() error {
			err := c.Stop(context.Background())
			probe.Close()
			drop()
			return err
		},
	}, nil
}

func init() { addSection("pressure", pressure) }

// pressureSystems are the systems of the section, in run order.
var pressureSystems = []func(ctx context.Context, e *env, clock *pressureClock) (*pressureTarget, error){
	openLeaseworkPressure,
	openRiverPressure,
}

func pressure(ctx context.Context, e *env) ([]table, error) {
	var runs []pressureRun
	for _, open := range pressureSystems {
		run, err := runPressure(ctx, e, open)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", run.label, err)
		}
		runs = append(runs, run)
	}
	return pressureTables(e, runs), nil
}

// baselines returns, for each phase, the index of the clean phase (or,
// with -quick, the recovery standing for it) its goals compare with.
func baselines(rows []pressureRow) []int {
	out := make([]int, len(rows))
	base := 0
	for i, r := range rows {
		if r.phase.role == roleStress && i > 0 {
			base = i - 1
		}
		out[i] = base
	}
	return out
}

// goals returns the three goal cells of phase i.
func goals(rows []pressureRow, i int, rate float64) (stress, pickup, recovery string) {
	r, base := rows[i], rows[baselines(rows)[i]]
	stress, recovery = "—", "—"
	if r.phase.role == roleStress {
		x := r.rate() / base.rate()
		stress = fmt.Sprintf("%s (%.2f×)", yesNo(x >= 0.8), x)
	}
	pickup = yesNo(r.p99 < time.Second)
	if r.phase.role == roleRecovery {
		// Back to clean: the backlog no more than the clean phase's plus
		// one second of production.
		recovery = fmt.Sprintf("%s (depth %s)", yesNo(float64(r.depth) <= float64(base.depth)+rate), thousands(float64(r.depth)))
	}
	return stress, pickup, recovery
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// pressureTables prints one table per system and the comparison.
func pressureTables(e *env, runs []pressureRun) []table {
	rate, phaseLen := pressureSettings(e)
	var out []table
	for _, run := range runs {
		t := table{
			title: fmt.Sprintf("Pressure: %s (%s), producer at %s events/s", run.label, run.config, thousands(rate)),
			header: []string{"phase", "producer events/s", "enqueued", "completed/s", "pickup p50", "pickup p99",
				"depth at end", "dead tuples", "table + indexes", "indexes", "claim statement (from the oldest)"},
		}
		for i, r := range run.rows {
			claim := r.claimTimeErr
			if claim == "" {
				claim = ms(r.claimTime) + " (" + ms(r.claimFull) + ")"
			}
			t.rows = append(t.rows, []string{
				fmt.Sprintf("%d. %s", i+1, r.phase.name),
				thousands(rate * r.phase.rate),
				thousands(float64(r.enqueued)),
				thousands(r.rate()),
				ms(r.p50), ms(r.p99),
				thousands(float64(r.depth)),
				thousands(float64(r.deadTuples)),
				mib(r.totalBytes), mib(r.indexBytes),
				claim,
			})
		}
		t.notes = append(t.notes, fmt.Sprintf("%s events enqueued in all, %s finished as the table shows after the drain", thousands(float64(run.enqueued)), thousands(float64(run.finished))))
		out = append(out, t)
	}
	if len(runs) == 2 {
		lw, rv := runs[0], runs[1]
		t := table{
			title: fmt.Sprintf("Pressure: %s beside %s, producer at %s events/s", lw.label, rv.label, thousands(rate)),
			header: []string{"phase", "completed/s ÷ River", lw.label + " p99", rv.label + " p99",
				"stress ≥ 0.8× clean rate (" + lw.label + " / " + rv.label + ")",
				"p99 pickup < 1 s (" + lw.label + " / " + rv.label + ")",
				"recovered within one phase (" + lw.label + " / " + rv.label + ")"},
		}
		for i := range lw.rows {
			if i >= len(rv.rows) {
				break
			}
			ls, lp, lr := goals(lw.rows, i, rate)
			rs, rp, rr := goals(rv.rows, i, rate)
			t.rows = append(t.rows, []string{
				fmt.Sprintf("%d. %s", i+1, lw.rows[i].phase.name),
				fmt.Sprintf("%.2f", lw.rows[i].rate()/rv.rows[i].rate()),
				ms(lw.rows[i].p99), ms(rv.rows[i].p99),
				ls + " / " + rs, lp + " / " + rp, lr + " / " + rr,
			})
		}
		out = append(out, t)
	}
	last := &out[len(out)-1]
	last.notes = append(last.notes,
		fmt.Sprintf("one system at a time, each on a schema of its own on the same server; phases of %v each (plus the start of the stress and the previous phase's measurements, which fall in the phase), one after the other without a pause; the producer commits, every %v, the events due at the phase's rate in one transaction (at most %s)", phaseLen, pressureTick, thousands(pressureMaxBatch)),
		fmt.Sprintf("every handler sleeps %v; completed/s counts handler calls returned during the phase; pickup from the producer's commit returning to the handler's start, for the events enqueued in the phase, however late they were picked up; percentiles by nearest rank", pressureHandlerSleep),
		"idle in transaction: a connection of its own runs BEGIN; SELECT txid_current(); and sits idle until the phase ends, pinning the xmin horizon; REPEATABLE READ readers: each holds one read-only REPEATABLE READ transaction for the phase, scanning the whole events table again and again; overload: the producer at the rate shown",
		"depth at end: rows not finished (leasework READY or INPROGRESS; River neither completed, cancelled nor discarded); dead tuples: pg_stat_user_tables.n_dead_tup (reported by backends at most once a second); sizes: pg_total_relation_size and pg_indexes_size of the events table; all read at the phase's end, the stress still on",
		"claim statement: execution time of one EXPLAIN (ANALYZE) of the claim (lease.Store.ExplainClaim, rolled back) at the phase's end, from the worker's floors (a second before the due time of the row finished last; expired leases from a second ago), and in brackets from the oldest, as the worker's sweeps claim (at least once a second, beside its claims); River: n/a",
		"goals: a stress phase's completion rate at least 0.8× the clean phase's before it; p99 pickup under 1 s; by a recovery phase's end, the queue depth no more than the clean phase's plus one second of production",
		"leasework through pgx only; lib/pq is not measured here",
	)
	if e.quick {
		last.notes = append(last.notes, fmt.Sprintf("-quick: phases of %v, the producer capped at %d events/s unless -pressure-rate is given, no clean phase before the second and third stress (the recovery before stands for it); figures are rough", phaseLen, pressureQuickRate))
	}
	return out
}
