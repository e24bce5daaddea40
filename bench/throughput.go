package main

// The throughput section, and the runners it shares with the server section:
// one function per system that enqueues n no-op events into a schema of its
// own, runs them all through, stops everything it started, drops the
// schema, and returns how long the run took.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

// lwBestCandidates are the leasework configurations tried for the "best"
// rows: each is run in every round, and the one with the highest median is
// reported. Add a candidate here to try it.
var lwBestCandidates = []lwShape{
	{Workers: 1, Concurrency: 1000},
	{Workers: 1, Concurrency: 2000},
	{Workers: 2, Concurrency: 1000},
}

// benchKind is the kind of every leasework event the sections enqueue.
const benchKind = "bench"

// enqueueBatch is how many events one enqueue transaction carries, as
// River's inserts carry riverInsertBatch.
const enqueueBatch = 5000

// stallTimeout fails a run in which no event completes for this long.
const stallTimeout = time.Minute

// lwShape is one leasework configuration: every field not here is left at
// its zero value, the framework's default.
type lwShape struct {
	Workers            int  // workers in this process, each on a pool of its own; zero means 1
	Concurrency        int  // framework.Config.Concurrency of each worker; zero means the default
	DeleteAtCompletion bool // framework.Config.DeleteAtCompletion
	Keys               int  // the events' keys: event i has key i%Keys; zero means keyless
	Partitions         int  // the events' partitions: event i is of partition i%Partitions; zero means none
	// Limits are declared on the table before its events are enqueued.
	Limits []lease.Limit
}

func (s lwShape) String() string {
	c := fmt.Sprint(s.Concurrency)
	if s.Concurrency == 0 {
		c = fmt.Sprintf("%d (default)", framework.DefaultConcurrency)
	}
	out := fmt.Sprintf("%d × %s", max(s.Workers, 1), c)
	if s.DeleteAtCompletion {
		out += ", DeleteAtCompletion"
	}
	if s.Keys > 0 {
		out += fmt.Sprintf(", %s keys", thousands(float64(s.Keys)))
	}
	if s.Partitions > 0 {
		out += fmt.Sprintf(", %s partitions", thousands(float64(s.Partitions)))
	}
	for _, l := range s.Limits {
		name := l.Name
		if l.Scope == lease.ScopePartition && name == "" {
			name = "(each)"
		}
		out += fmt.Sprintf(", %s %s ≤ %s live", l.Scope, name, thousands(float64(l.Max)))
	}
	return out
}

// config is the worker configuration of the shape: only the table, the
// logger and the shape's own fields are set.
func (s lwShape) config(schema string) framework.Config {
	return framework.Config{
		Schema:             schema,
		Concurrency:        s.Concurrency,
		DeleteAtCompletion: s.DeleteAtCompletion,
		Logger:             slog.New(slog.DiscardHandler),
	}
}

// runHooks let a section measure around the timed part of a run.
type runHooks struct {
	Handler leasework.Handler               // the leasework runners' handler of every event, called concurrently; nil: a no-op
	Before  func(ctx context.Context) error // after the enqueue, just before the clock starts
	After   func(ctx context.Context) error // once every event is done, before anything stops
	Stopped func(ctx context.Context) error // once the system has stopped and closed its pools, before its schema is dropped
}

func (h runHooks) before(ctx context.Context) error {
	if h.Before == nil {
		return nil
	}
	return h.Before(ctx)
}

func (h runHooks) after(ctx context.Context) error {
	if h.After == nil {
		return nil
	}
	return h.After(ctx)
}

func (h runHooks) stopped(ctx context.Context) error {
	if h.Stopped == nil {
		return nil
	}
	return h.Stopped(ctx)
}

// runResult is one timed run.
type runResult struct {
	Jobs    int
	Elapsed time.Duration
}

// Rate is the run's jobs per second.
func (r runResult) Rate() float64 { return float64(r.Jobs) / r.Elapsed.Seconds() }

// runner runs n events through one system, calling hooks around the timed
// part.
type runner func(ctx context.Context, e *env, n int, hooks runHooks) (runResult, error)

// lwDriver returns leasework's driver by name: "pgx" or "pq".
func lwDriver(name string) (leasework.Driver, error) {
	switch name {
	case "pgx":
		return pgxdriver.New(), nil
	case "pq":
		return pqdriver.New(), nil
	}
	return nil, fmt.Errorf("unknown leasework driver %q; want pgx or pq", name)
}

// lwTable is a migrated leasework table in a fresh schema, with n events
// enqueued, on pools of its own.
type lwTable struct {
	drv   leasework.Driver
	dbs   []*sql.DB // one per worker; the first also carries the store
	store *lease.Store
}

// newLWTable opens shape.Workers pools through driver drvName, migrates a
// table in a fresh schema and enqueues n events of benchKind over
// shape.Keys keys. Close it with close.
func newLWTable(ctx context.Context, e *env, drvName string, shape lwShape, n int) (_ *lwTable, err error) {
	drv, err := lwDriver(drvName)
	if err != nil {
		return nil, err
	}
	t := &lwTable{drv: drv}
	defer func() {
		if err != nil {
			t.close(e)
		}
	}()
	for range max(shape.Workers, 1) {
		db, err := drv.Open(e.dsn)
		if err != nil {
			return nil, err
		}
		t.dbs = append(t.dbs, db)
	}
	t.store, err = lease.New(t.dbs[0], drv, lease.Options{Schema: freshSchema("lw")})
	if err != nil {
		return nil, err
	}
	if _, err := t.store.Migrate(ctx); err != nil {
		return nil, err
	}
	for _, l := range shape.Limits {
		if _, err := t.store.SetLimit(ctx, l, "bench"); err != nil {
			return nil, err
		}
	}
	if err := enqueueLW(ctx, t.store, n, shape.Keys, shape.Partitions); err != nil {
		return nil, err
	}
	return t, settle(ctx, e, t.dbs[0], t.store.QualifiedTable())
}

// enqueueLW enqueues n events of benchKind, enqueueBatch to a transaction:
// keyless when keys is zero, else event i with key i%keys ("k0", "k1", …),
// so that each key's events are spread evenly over the run; of no
// partition when partitions is zero, else event i of partition
// i%partitions ("p0", "p1", …).
func enqueueLW(ctx context.Context, s *lease.Store, n, keys, partitions int) error {
	for i := 0; i < n; i += enqueueBatch {
		events := make([]lease.Event, min(enqueueBatch, n-i))
		for j := range events {
			events[j].Kind = benchKind
			if keys > 0 {
				events[j].Key = "k" + strconv.Itoa((i+j)%keys)
			}
			if partitions > 0 {
				events[j].Partition = "p" + strconv.Itoa((i+j)%partitions)
			}
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := s.Enqueue(ctx, tx, events...); err != nil {
			tx.Rollback()
			return fmt.Errorf("enqueue: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// closePools closes the table's pools; calling it again does nothing.
func (t *lwTable) closePools() {
	for _, db := range t.dbs {
		db.Close()
	}
	t.dbs = nil
}

// close closes the pools, then drops the schema through a connection of
// its own (dropRiverSchema drops any schema).
func (t *lwTable) close(e *env) {
	t.closePools()
	if t.store == nil {
		return
	}
	if err := dropRiverSchema(context.Background(), e.dsn, t.store.Schema()); err != nil {
		// A schema left behind costs only space; say so and go on.
		e.logf("drop schema %s: %v", t.store.Schema(), err)
	}
}

// settle leaves a freshly filled table as every system gets it before the
// clock starts: vacuumed and analysed (statistics gathered while nothing is
// in progress, as autovacuum would gather them after a bulk enqueue), and,
// on a throwaway server, checkpointed, so that no system's run pays for
// flushing the enqueue's pages.
func settle(ctx context.Context, e *env, db *sql.DB, qualifiedTable string) error {
	if _, err := db.ExecContext(ctx, "VACUUM (ANALYZE) "+qualifiedTable); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if e.server == nil {
		return nil
	}
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// settleNote says what settle did, for the tables' notes.
func settleNote(e *env) string {
	if e.server == nil {
		return "after each enqueue, the table is vacuumed and analysed before the clock starts (no CHECKPOINT: the server was given by DSN)"
	}
	return "after each enqueue, the table is vacuumed and analysed and the server checkpointed before the clock starts"
}

// waitCount waits until done() reaches n, checking every millisecond; it
// fails when the count stays still for stallTimeout.
func waitCount(ctx context.Context, n int64, done func() (int64, error)) error {
	last, lastAt := int64(-1), time.Now()
	for {
		c, err := done()
		if err != nil {
			return err
		}
		if c >= n {
			return nil
		}
		if c != last {
			last, lastAt = c, time.Now()
		} else if time.Since(lastAt) > stallTimeout {
			return fmt.Errorf("stalled: %d of %d done, none for %v", c, n, stallTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d done: %w", c, n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// leaseworkRunner runs events through framework workers of the shape,
// through driver drvName ("pgx" or "pq").
func leaseworkRunner(drvName string, shape lwShape) runner {
	return func(ctx context.Context, e *env, n int, hooks runHooks) (runResult, error) {
		return runLeasework(ctx, e, drvName, shape, n, hooks)
	}
}

// runLeasework enqueues n events, then runs shape.Workers workers until
// their counters show every event completed, then stops them.
func runLeasework(ctx context.Context, e *env, drvName string, shape lwShape, n int, hooks runHooks) (runResult, error) {
	t, err := newLWTable(ctx, e, drvName, shape, n)
	if err != nil {
		return runResult{}, err
	}
	defer t.close(e)
	res, err := t.work(ctx, shape, n, hooks)
	t.closePools()
	if err != nil {
		return runResult{}, err
	}
	return res, hooks.stopped(ctx)
}

// work runs the shape's workers, one on each pool, until they have
// completed n events, and returns once every worker has returned.
func (t *lwTable) work(ctx context.Context, shape lwShape, n int, hooks runHooks) (runResult, error) {
	workers := make([]*framework.Worker, len(t.dbs))
	for i, db := range t.dbs {
		w, err := framework.New(db, t.drv, shape.config(t.store.Schema()))
		if err != nil {
			return runResult{}, err
		}
		var h leasework.Handler = leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil })
		if hooks.Handler != nil {
			h = hooks.Handler
		}
		if err := w.Register(benchKind, h, framework.RetryPolicy{}); err != nil {
			return runResult{}, err
		}
		workers[i] = w
	}
	if err := hooks.before(ctx); err != nil {
		return runResult{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { stop(); running.Wait() }()
	begin := time.Now()
	for _, w := range workers {
		running.Go(func() { w.Run(runCtx) })
	}
	err := waitCount(ctx, int64(n), func() (int64, error) {
		var sum int64
		for _, w := range workers {
			sum += w.Counters().Completed
		}
		return sum, nil
	})
	elapsed := time.Since(begin)
	if err != nil {
		return runResult{}, err
	}
	return runResult{n, elapsed}, hooks.after(ctx)
}

// riverRunner runs jobs through a River client through driverName ("pgx" or
// "postgres", as newRiverClient takes it) with the settings.
func riverRunner(driverName string, settings riverSettings) runner {
	return func(ctx context.Context, e *env, n int, hooks runHooks) (runResult, error) {
		return runRiver(ctx, e, driverName, settings, n, hooks)
	}
}

// runRiver inserts n jobs, then starts a client and waits until its worker
// has run them all and the table shows them all completed (River completes
// jobs asynchronously, in batches), then stops it.
func runRiver(ctx context.Context, e *env, driverName string, settings riverSettings, n int, hooks runHooks) (runResult, error) {
	schema := freshSchema("river")
	defer func() {
		if err := dropRiverSchema(context.Background(), e.dsn, schema); err != nil {
			e.logf("drop schema %s: %v", schema, err)
		}
	}()
	if err := migrateRiver(ctx, e.dsn, schema); err != nil {
		return runResult{}, err
	}
	var worked atomic.Int64
	c, err := newRiverClient(ctx, driverName, e.dsn, schema, riverOptions{
		Settings: settings,
		Work: func(context.Context, *river.Job[riverArgs]) error {
			worked.Add(1)
			return nil
		},
	})
	if err != nil {
		return runResult{}, err
	}
	res, err := workRiver(ctx, e, c, n, &worked, hooks)
	if stopErr := c.Stop(context.Background()); err == nil && stopErr != nil {
		err = fmt.Errorf("river stop: %w", stopErr)
	}
	if err != nil {
		return runResult{}, err
	}
	return res, hooks.stopped(ctx)
}

// workRiver inserts n jobs, starts c and waits for them.
func workRiver(ctx context.Context, e *env, c *riverClient, n int, worked *atomic.Int64, hooks runHooks) (runResult, error) {
	if err := c.InsertN(ctx, 0, n); err != nil {
		return runResult{}, err
	}
	if err := settle(ctx, e, c.db, lease.QuoteIdent(c.schema)+".river_job"); err != nil {
		return runResult{}, err
	}
	if err := hooks.before(ctx); err != nil {
		return runResult{}, err
	}
	begin := time.Now()
	if err := c.Start(ctx); err != nil {
		return runResult{}, err
	}
	// The worker's count first: polling the table meanwhile would load the
	// server being measured.
	err := waitCount(ctx, int64(n), func() (int64, error) { return worked.Load(), nil })
	if err == nil {
		err = waitCount(ctx, int64(n), func() (int64, error) { return c.Completed(ctx) })
	}
	elapsed := time.Since(begin)
	if err != nil {
		return runResult{}, err
	}
	return runResult{n, elapsed}, hooks.after(ctx)
}

// bareLoops is how many goroutines the bare loop runs, and bareClaim how
// many rows each claims at a time.
const (
	bareLoops = 2
	bareClaim = 100
)

// runBareLoop runs n events through leasework's own statements with no
// runtime around them: bareLoops goroutines on one pgx pool, each claiming
// bareClaim rows (lease.Store.Claim) and completing them in one guarded
// statement (lease.Store.WriteMany of lease.Complete writes), until a claim finds nothing.
func runBareLoop(ctx context.Context, e *env, n int, hooks runHooks) (runResult, error) {
	t, err := newLWTable(ctx, e, "pgx", lwShape{}, n)
	if err != nil {
		return runResult{}, err
	}
	defer t.close(e)
	res, err := t.bareLoop(ctx, n, hooks)
	t.closePools()
	if err != nil {
		return runResult{}, err
	}
	return res, hooks.stopped(ctx)
}

// bareLoop runs the loops until a claim finds nothing.
func (t *lwTable) bareLoop(ctx context.Context, n int, hooks runHooks) (runResult, error) {
	if err := hooks.before(ctx); err != nil {
		return runResult{}, err
	}
	var (
		done  atomic.Int64
		loops sync.WaitGroup
		errs  = make([]error, bareLoops)
	)
	begin := time.Now()
	for i := range bareLoops {
		loops.Go(func() {
			for {
				claims, err := t.store.Claim(ctx, lease.ClaimRequest{Limit: bareClaim, Lease: time.Minute, Kinds: []string{benchKind}, Worker: "bare"})
				if err != nil || len(claims) == 0 {
					errs[i] = err
					return
				}
				writes := make([]lease.Write, len(claims))
				for j, c := range claims {
					writes[j] = lease.Complete(c.Ref())
				}
				results, err := t.store.WriteMany(ctx, writes...)
				if err != nil {
					errs[i] = err
					return
				}
				for _, r := range results {
					if r.Verdict == lease.VerdictNoAnswer {
						errs[i] = r.Err // the statement failed
						return
					}
					if r.Err == nil {
						done.Add(1)
					}
				}
			}
		})
	}
	loops.Wait()
	elapsed := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return runResult{}, err
	}
	if done.Load() != int64(n) {
		return runResult{}, fmt.Errorf("bare loop: %d of %d events completed", done.Load(), n)
	}
	return runResult{n, elapsed}, hooks.after(ctx)
}

// tpRow is one row of the throughput table: one system, or several
// candidates of which the best is reported.
type tpRow struct {
	label      string
	candidates []tpCandidate
	reference  bool // the row the ratios are taken against
}

type tpCandidate struct {
	name string // the configuration, as printed
	run  runner
}

// lwBestRow is a row trying every configuration of lwBestCandidates, with
// change applied to each.
func lwBestRow(label, drvName string, change func(*lwShape)) tpRow {
	row := tpRow{label: label}
	for _, s := range lwBestCandidates {
		if change != nil {
			change(&s)
		}
		row.candidates = append(row.candidates, tpCandidate{s.String(), leaseworkRunner(drvName, s)})
	}
	return row
}

// throughputRows are the systems of the throughput table, in print order.
func throughputRows() []tpRow {
	riverBenchName := fmt.Sprintf("%s workers, FetchCooldown %v, FetchPollInterval %v",
		thousands(float64(riverBench.maxWorkers)), riverBench.fetchCooldown, riverBench.fetchPollInterval)
	return []tpRow{
		{label: "leasework pgx, defaults", candidates: []tpCandidate{{lwShape{}.String(), leaseworkRunner("pgx", lwShape{})}}},
		{label: "leasework pq, defaults", candidates: []tpCandidate{{lwShape{}.String(), leaseworkRunner("pq", lwShape{})}}},
		lwBestRow("leasework pgx, best", "pgx", nil),
		lwBestRow("leasework pq, best", "pq", nil),
		{label: "River pgx (riverpgxv5), bench settings", reference: true, candidates: []tpCandidate{{riverBenchName, riverRunner("pgx", riverBench)}}},
		{label: "River database/sql + lib/pq (riverdatabasesql), bench settings", candidates: []tpCandidate{{riverBenchName, riverRunner("postgres", riverBench)}}},
		{label: fmt.Sprintf("bare loop: Claim of %d + WriteMany, %d loops, pgx", bareClaim, bareLoops), candidates: []tpCandidate{{"lease.Store only", runBareLoop}}},
		lwBestRow("leasework pgx best, DeleteAtCompletion", "pgx", func(s *lwShape) { s.DeleteAtCompletion = true }),
		lwBestRow("leasework pq best, DeleteAtCompletion", "pq", func(s *lwShape) { s.DeleteAtCompletion = true }),
	}
}

// bestShapes remembers the throughput section's winning leasework shape per
// driver, for the server section of the same run.
var bestShapes = map[string]lwShape{}

func init() { addSection("throughput", throughput) }

// sizes returns the events per run and the rounds: smaller with -quick.
func sizes(e *env) (jobs, rounds int) {
	if e.quick {
		return min(e.jobs, 2000), min(e.rounds, 2)
	}
	return e.jobs, e.rounds
}

func throughput(ctx context.Context, e *env) ([]table, error) {
	jobs, rounds := sizes(e)
	rows := throughputRows()
	type slot struct{ row, cand int }
	var runs []slot
	for i, r := range rows {
		for j := range r.candidates {
			runs = append(runs, slot{i, j})
		}
	}
	// rates[row][candidate][round]
	rates := make([][][]float64, len(rows))
	for i, r := range rows {
		rates[i] = make([][]float64, len(r.candidates))
	}
	for round := range rounds {
		// The same order each round, started at a different run, so that no
		// system always follows the same one or runs first.
		shift := round * len(runs) / rounds
		for k := range runs {
			s := runs[(k+shift)%len(runs)]
			c := rows[s.row].candidates[s.cand]
			res, err := c.run(ctx, e, jobs, runHooks{})
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", rows[s.row].label, c.name, err)
			}
			e.logf("throughput round %d: %s (%s): %s jobs/s", round+1, rows[s.row].label, c.name, thousands(res.Rate()))
			rates[s.row][s.cand] = append(rates[s.row][s.cand], res.Rate())
		}
	}

	t := table{
		title:  "Throughput: no-op events enqueued up front, jobs/s",
		header: []string{"system", "configuration"},
	}
	for r := range rounds {
		t.header = append(t.header, fmt.Sprintf("round %d", r+1))
	}
	t.header = append(t.header, "median", "÷ River pgx bench")
	var reference float64
	best := make([]int, len(rows))
	for i, r := range rows {
		for j := range r.candidates {
			if median(rates[i][j]) > median(rates[i][best[i]]) {
				best[i] = j
			}
		}
		if r.reference {
			reference = median(rates[i][best[i]])
		}
	}
	for i, r := range rows {
		c := best[i]
		cells := []string{r.label, r.candidates[c].name}
		for _, x := range rates[i][c] {
			cells = append(cells, thousands(x))
		}
		m := median(rates[i][c])
		cells = append(cells, thousands(m), fmt.Sprintf("%.2f", m/reference))
		t.rows = append(t.rows, cells)
		if len(r.candidates) > 1 {
			var others []string
			for j, cand := range r.candidates {
				others = append(others, fmt.Sprintf("%s %s", cand.name, thousands(median(rates[i][j]))))
			}
			t.notes = append(t.notes, fmt.Sprintf("%s: median jobs/s of each candidate: %s; the best is reported", r.label, strings.Join(others, "; ")))
		}
	}
	for _, drvName := range []string{"pgx", "pq"} {
		i := slices.IndexFunc(rows, func(r tpRow) bool { return r.label == "leasework "+drvName+", best" })
		bestShapes[drvName] = lwBestCandidates[best[i]]
	}
	t.notes = append(t.notes,
		fmt.Sprintf("%s events per run, %d rounds; every configuration runs once per round, in one order started at a different run each round; fsync and the server's settings as above", thousands(float64(jobs)), rounds),
		settleNote(e),
		fmt.Sprintf("leasework defaults: framework.Config with only Schema and Logger set (Concurrency %d, PollInterval %v, Lease %v, DONE rows kept %.0f h); the other configurations change only the fields named; each worker on a pool of its own opened by its driver; done when the workers' Counters().Completed reach the events",
			framework.DefaultConcurrency, framework.DefaultPollInterval, framework.DefaultLease, framework.DefaultRetention.Hours()),
		fmt.Sprintf("River v0.51.2 bench settings, as cmd/river/riverbench sets them: %s workers on the default queue, FetchCooldown %v, FetchPollInterval %v; completed jobs kept (River's default); pools of pgxpool's default size (%d) for both drivers; riverdatabasesql without a listener (it polls); done when the worker has run every job and the table shows them all completed",
			thousands(float64(riverBench.maxWorkers)), riverBench.fetchCooldown, riverBench.fetchPollInterval, pgxDefaultMaxConns()),
		fmt.Sprintf("bare loop: %d goroutines, each lease.Store.Claim of %d rows then one WriteMany completing them, until a claim finds nothing; DONE rows kept", bareLoops, bareClaim),
	)
	if e.quick {
		t.notes = append(t.notes, "-quick: few events, figures are rough")
	}
	return []table{t}, nil
}
