//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// What a run does, and its limits.
type soakConfig struct {
	name      string
	perKind   int           // faults of each kind but failover
	failovers int           // failovers to the standby: the long run's
	meanGap   time.Duration // between two faults' starts
	minEvents int           // events acknowledged, at least
	rate      int           // events enqueued per second
	bound     time.Duration // the whole run; reaching it fails the soak
}

var (
	// shortSoak is CI's: a few faults of each kind, several hundred
	// events, under a minute on an idle 2-core machine with -race.
	shortSoak = soakConfig{name: "short", perKind: 3, meanGap: 500 * time.Millisecond,
		minEvents: 700, rate: 60, bound: 15 * time.Minute}
	// longSoak is LEASEWORK_SOAK=long's: at least 250 faults of each
	// kind, and failovers of the primary to its streaming standby.
	longSoak = soakConfig{name: "long", perKind: 260, failovers: 40, meanGap: 500 * time.Millisecond,
		minEvents: 20000, rate: 40, bound: 55 * time.Minute}
)

const (
	soakEnv    = "LEASEWORK_SOAK"        // "long" for the long run
	seedEnv    = "LEASEWORK_SOAK_SEED"   // replays a run's schedule
	traceEnv   = "LEASEWORK_SOAK_TRACE"  // set: log every fault as it is done
	faultsEnv  = "LEASEWORK_SOAK_FAULTS" // overrides the faults of each kind (failovers too), with the short run's events, to try a configuration quickly
	numWorkers = 4

	// maxAttempts is the events' budget: far above the claims a fault
	// costs an event, so that no event ends FAILED that did not ask to.
	maxAttempts = 200

	// drainBound bounds the wait, after the last fault, for every event to
	// finish: retries come due within seconds, and every queue's claim
	// loop is woken each second by the schedule's firings.
	drainBound = 4 * time.Minute

	// stopBound bounds a worker's exit after SIGTERM: Run returns within
	// GracePeriod + StopTimeout; the rest is slack for a loaded machine.
	stopBound = workerGrace + workerStopTimeout + 30*time.Second

	// pickupBound bounds the pickup of the second of two probes in a row
	// (see finalProbes): no poll can find it that soon.
	pickupBound = workerPoll / 2
)

// soak is one run.
type soak struct {
	t       *testing.T
	seed    uint64
	cfg     soakConfig
	trace   bool
	brk     string        // the library break the run is built with (breaks_test.go), or ""
	admin   *sql.DB       // the test's checks and fixtures
	store   *lease.Store  // the enqueuer's, through pgx: every batch by INSERT
	copier  *lease.Store  // the enqueuer's other, through lib/pq: every batch by COPY
	ops     *lease.Store  // the operator's: cancels, pauses, limits
	edge    *lease.Store  // the slow renewals' (limits_test.go), as a worker of its own
	front   *pgtest.Proxy // the long run's: the test's own sessions reach the primary through it
	runsDir string        // the workers' runs files
	cancel  context.CancelFunc
	cleaned sync.Once

	mu              sync.Mutex
	primary         *pgserver.Server
	standby         *pgserver.Server // the long run's; nil in the short one
	serverUp        time.Time        // when the last restart or failover had the server back
	slots           []*slot
	all             []*worker // every worker process started
	faults          [numFaults]int
	recovery        [numFaults]time.Duration // the longest recovery after each kind
	stopsReclaimed  int                      // stops during which another worker re-claimed a row
	stopsIdle       int                      // stops of a worker that held nothing, after tries
	terminateMisses int                      // terminates that hit no LISTEN connection: not counted, done again
	redo            []fault                  // faults to do again after the schedule
	acked           int                      // events of enqueues whose commit returned
	unknown         int                      // events of enqueues whose commit failed: they may exist
	enqueues        []history.Enqueue
	cancels         []history.Cancel
	pauses          []history.Pause
	limits          []history.Limit
	rateLimits      []history.RateLimit
	slowTries       int // slow renewals begun (limits_test.go)
	slowRenewals    int // slow renewals made
	slowMissed      int // slow renewals that failed: refused, or a statement failed
	faultWindows    []history.Fault
	settled         time.Time // when the drain began
	phases          phases
	checked         bool      // the history was checked
	began           time.Time // the run's start
	finished        bool      // the test is over: nothing more is reported
	aborted         bool      // a failure ended the run
}

func TestSoak(t *testing.T) {
	cfg := shortSoak
	if os.Getenv(soakEnv) == "long" {
		cfg = longSoak
	}
	if v := os.Getenv(faultsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", faultsEnv, v)
		}
		cfg.perKind, cfg.minEvents = n, min(cfg.minEvents, shortSoak.minEvents)
		if cfg.failovers > 0 {
			cfg.failovers = n
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
	}
	brk, err := breakOf()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak (%s): seed=%d (replay its schedule with %s=%d)", cfg.name, seed, seedEnv, seed)
	if brk != "" {
		t.Logf("the library is broken on purpose (%s=%s): the history must show %s violated", breakEnv, brk, strings.Join(breaks[brk].properties, ", "))
	}
	bound := cfg.bound
	if dl, ok := t.Deadline(); ok {
		// End, and say why, before go test's own timeout does.
		bound = min(bound, time.Until(dl)-time.Minute)
	}
	if cfg.name == "long" && bound < cfg.bound {
		t.Fatalf("the long soak may take up to %v: run it with -timeout %v", cfg.bound, cfg.bound+5*time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	s := &soak{t: t, seed: seed, cfg: cfg, trace: os.Getenv(traceEnv) != "", brk: brk, cancel: cancel,
		primary: server, runsDir: t.TempDir()}
	t.Cleanup(s.cleanup)
	defer s.salvage()
	s.began = time.Now()
	phases := &s.phases
	phases.start()
	if err := s.setup(ctx); err != nil {
		t.Fatalf("soak seed=%d: setting up: %v", seed, err)
	}

	phases.mark("setup")
	start := time.Now()
	injected := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() { s.enqueueLoop(ctx, injected) })
	load.Go(func() { s.cancelLoop(ctx, injected) })
	load.Go(func() { s.pauseLoop(ctx, injected) })
	load.Go(func() { s.limitLoop(ctx, injected) })
	load.Go(func() { s.slowRenewalLoop(ctx, injected) })
	s.inject(ctx)
	close(injected)
	load.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		s.failf("the run did not end within %v", bound)
	}
	if t.Failed() {
		return
	}
	if err := s.lastSlowRenewal(ctx); err != nil {
		t.Fatalf("soak seed=%d: %v", seed, err)
	}
	faulted := time.Since(start)
	phases.mark("faults")
	if err := s.drain(ctx); err != nil {
		t.Fatalf("soak seed=%d: waiting for every event to finish: %v", seed, err)
	}
	phases.mark("drain")
	pickup, err := s.finalProbes(ctx)
	if err != nil {
		t.Fatalf("soak seed=%d: the probes after the last fault: %v", seed, err)
	}
	phases.mark("probes")
	s.stopWorkers()
	phases.mark("stop")
	if t.Failed() {
		return
	}
	s.check(ctx, pickup, faulted, time.Since(start))
}

// phases times the run's phases, for its report.
type phases struct {
	last time.Time
	took []string
}

func (p *phases) start() { p.last = time.Now() }

// mark ends the phase named.
func (p *phases) mark(name string) {
	now := time.Now()
	p.took = append(p.took, fmt.Sprintf("%s %v", name, now.Sub(p.last).Round(100*time.Millisecond)))
	p.last = now
}

func (p *phases) String() string { return strings.Join(p.took, ", ") }

// failf reports a failure of the soak, with its seed, and ends the run.
// Goroutines call it. Once the run is ended, failures that only say so
// (their error is the run's cancellation) are not reported.
func (s *soak) failf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	if s.aborted && slices.ContainsFunc(args, func(a any) bool {
		err, ok := a.(error)
		return ok && errors.Is(err, context.Canceled)
	}) {
		return
	}
	s.aborted = true
	s.t.Errorf("soak seed=%d: "+format, append([]any{s.seed}, args...)...)
	s.cancel()
}

// tracef logs a line about the run when $LEASEWORK_SOAK_TRACE is set.
func (s *soak) tracef(format string, args ...any) {
	if s.trace {
		s.t.Logf(format, args...)
	}
}

// setup creates the schema, the sink, the effects and the audit,
// declares the limits, starts the long run's standby, and starts the
// workers.
func (s *soak) setup(ctx context.Context) error {
	pgx := pgtest.Drivers[0].New()
	front := server.DSN()
	if s.cfg.failovers > 0 {
		// The test's own sessions follow the primary through a proxy.
		s.front = pgtest.NewProxyTo(s.t, server.DSN())
		front = s.front.DSN()
	}
	openWith := func(drv leasework.Driver, app string) (*sql.DB, error) {
		dsn, err := withApp(front, app)
		if err != nil {
			return nil, err
		}
		db, err := drv.Open(dsn)
		if err == nil {
			db.SetMaxIdleConns(8) // database/sql keeps 2: a connection set up again for nearly every statement
		}
		return db, err
	}
	open := func(app string) (*sql.DB, error) { return openWith(pgx, app) }
	var err error
	if s.admin, err = open(adminApp); err != nil {
		return err
	}
	enq, err := open(enqueuerApp)
	if err != nil {
		return err
	}
	opsDB, err := open(operatorApp)
	if err != nil {
		return err
	}
	// A run with -count=2 finds the last one's schema.
	if _, err := s.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+soakSchema+` CASCADE`); err != nil {
		return err
	}
	if s.store, err = lease.New(enq, pgx, lease.Options{Schema: soakSchema}); err != nil {
		return err
	}
	if s.ops, err = lease.New(opsDB, pgx, lease.Options{Schema: soakSchema}); err != nil {
		return err
	}
	edgeDB, err := open(edgeApp)
	if err != nil {
		return err
	}
	if s.edge, err = lease.New(edgeDB, pgx, lease.Options{Schema: soakSchema}); err != nil {
		return err
	}
	pq := pgtest.Drivers[1].New()
	copyDB, err := openWith(pq, enqueuerApp)
	if err != nil {
		return err
	}
	if s.copier, err = lease.New(copyDB, pq, lease.Options{Schema: soakSchema, EnqueueCopyMin: 1}); err != nil {
		return err
	}
	if _, err := s.store.Migrate(ctx); err != nil {
		return err
	}
	if err := createTables(ctx, s.admin, s.store); err != nil {
		return err
	}
	if err := s.declareLimits(ctx); err != nil {
		return fmt.Errorf("declare the limits: %w", err)
	}
	if s.cfg.failovers > 0 {
		standby, err := pgserver.StartStandby(ctx, server, serverOptions())
		if err != nil {
			return fmt.Errorf("start the standby: %w", err)
		}
		s.standby = standby
		if err := server.RequireSyncStandby(ctx, "*"); err != nil {
			return fmt.Errorf("make the standby synchronous: %w", err)
		}
	}
	for i := range numWorkers {
		sl := &slot{n: i, driver: pgtest.Drivers[i%len(pgtest.Drivers)].Name, proxy: pgtest.NewProxyTo(s.t, server.DSN())}
		s.slots = append(s.slots, sl)
		if _, err := s.startWorker(sl); err != nil {
			return err
		}
	}
	// Each worker is up, handles events and listens before any fault.
	var wg sync.WaitGroup
	errs := make([]error, len(s.slots))
	for i, sl := range s.slots {
		wg.Go(func() { errs[i] = s.recovered(ctx, sl, noFault, time.Time{}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("a worker did not start: %w", err)
		}
	}
	// Again, to run before the proxies made since close (cleanups run
	// last first): the long run's schema is dropped through one.
	s.t.Cleanup(s.cleanup)
	return nil
}

// salvage checks the history of a run against a deliberate break that
// failed before its check (a break can keep the workers from recovering
// within the soak's bounds), so that the run still shows whether the
// break was caught.
func (s *soak) salvage() {
	if s.brk == "" || s.checked || !s.t.Failed() || s.admin == nil {
		return
	}
	s.killAll()
	s.mu.Lock()
	if s.settled.IsZero() {
		s.settled = s.began // the drain never began: no event had to finish
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.t.Logf("the run against the break %s failed before its end; its history so far:", s.brk)
	if v, ok := s.checkHistory(ctx); ok {
		s.t.Log(v.String())
	}
}

// killAll ends every worker process still running, whatever state it is
// in.
func (s *soak) killAll() {
	s.mu.Lock()
	all := s.all
	s.mu.Unlock()
	for _, w := range all {
		select {
		case <-w.exited:
			continue
		default:
		}
		w.ending.Store(true)
		_ = w.signal(syscall.SIGCONT)
		_ = w.signal(syscall.SIGKILL)
		w.markGone()
		if err := w.wait(processBound); err != nil {
			s.t.Error(err)
		}
	}
}

// cleanup ends every worker process still running, whatever state the
// test left it in, drops the schema, and stops the servers TestMain does
// not. It does so once, however often it is called.
func (s *soak) cleanup() { s.cleaned.Do(s.cleanupOnce) }

func (s *soak) cleanupOnce() {
	s.killAll()
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	if s.admin != nil {
		if !s.t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), sqlBound)
			if _, err := s.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+soakSchema+` CASCADE`); err != nil {
				s.t.Errorf("drop the soak's schema: %v", err)
			}
			cancel()
		}
		s.admin.Close()
	}
	for _, st := range []*lease.Store{s.store, s.copier, s.ops, s.edge} {
		if st != nil {
			st.DB().Close()
		}
	}
	for _, srv := range []*pgserver.Server{s.primary, s.standby} {
		if srv != nil && srv != server {
			srv.Stop()
		}
	}
}

// drain waits until every event enqueued so far is finished: no fault
// happens any more, and the workers recovered from every one by
// themselves. The schedule keeps firing meanwhile; its new firings are
// not waited for.
func (s *soak) drain(ctx context.Context) error {
	var since time.Time
	if err := retry(ctx, "read the clock", func(ctx context.Context) (err error) {
		since, err = dbNow(ctx, s.admin)
		return err
	}); err != nil {
		return err
	}
	s.mu.Lock()
	s.settled = since
	s.mu.Unlock()
	unfinished := `FROM ` + s.store.QualifiedTable() + ` WHERE status NOT IN ('DONE', 'FAILED', 'DISCARDED') AND created_at < $1`
	err := poll(ctx, drainBound, "every event finished after the last fault", func(ctx context.Context) (bool, error) {
		var n int
		err := s.admin.QueryRowContext(ctx, `SELECT count(*) `+unfinished, since).Scan(&n)
		return n == 0, err
	})
	if err == nil {
		return nil
	}
	rows, qerr := s.admin.QueryContext(ctx, `SELECT id, event_id, kind, COALESCE(key, ''), queue, status, generation, attempt,
			COALESCE(worker, ''), COALESCE(lease_until::text, ''), next_attempt_at::text, COALESCE(last_error, '') `+unfinished+`
		ORDER BY id LIMIT 20`, since)
	if qerr != nil {
		return fmt.Errorf("%w (and reading the unfinished rows: %v)", err, qerr)
	}
	defer rows.Close()
	var b strings.Builder
	holders := map[string]bool{}
	for rows.Next() {
		var id, gen, attempt int64
		var eventID, kind, key, queue, status, worker, leaseUntil, next, lastError string
		if err := rows.Scan(&id, &eventID, &kind, &key, &queue, &status, &gen, &attempt, &worker, &leaseUntil, &next, &lastError); err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n  row %d %s (%s, key %q, queue %s): %s generation %d attempt %d worker %q lease_until %s next_attempt_at %s last_error %q",
			id, eventID, kind, key, queue, status, gen, attempt, worker, leaseUntil, next, lastError)
		holders[worker] = holders[worker] || status == "INPROGRESS"
	}
	s.mu.Lock()
	all := s.all
	s.mu.Unlock()
	for _, w := range all {
		if holders[w.id] {
			fmt.Fprintf(&b, "\nthe end of the output of %s, which holds some, with its goroutines (SIGQUIT):\n%s", w.id, w.dump())
		}
	}
	return fmt.Errorf("%w; unfinished rows:%s", err, b.String())
}

// finalProbes checks, after the last fault, that each worker is woken by
// NOTIFY, and returns the longest pickup. Each worker gets probe A, then,
// as soon as A's receipt is in, probe B, of a kind and a queue only it
// serves. Having claimed A alone, fewer rows than its free slots, the
// probe queue's claim loop waits PollInterval (30s) before it polls again;
// only a wakeup can make it claim B sooner: a notification (B's own, or
// any other, since every notification wakes every queue's loop), or its
// listener connecting again (which shows LISTEN works too). No other lease
// runs in the queue, so no expiry wakes it either. A failed claim is tried
// again sooner, so a pair during which the worker counted a failed claim
// (a statement slow on a loaded machine, say) proves nothing and is done
// again. So B picked up within pickupBound (15s) of its enqueue, with no
// claim failed meanwhile, was woken by NOTIFY.
func (s *soak) finalProbes(ctx context.Context) (time.Duration, error) {
	var longest time.Duration
	for _, sl := range s.slots {
		s.mu.Lock()
		w := sl.w
		s.mu.Unlock()
		var pickups [2]time.Duration
		for try := 1; ; try++ {
			before, err := w.freshCounters(ctx)
			if err != nil {
				return 0, err
			}
			for i := range pickups {
				if pickups[i], err = s.probePickup(ctx, sl, w.id); err != nil {
					return 0, err
				}
			}
			after, err := w.freshCounters(ctx)
			if err != nil {
				return 0, err
			}
			if after.ClaimErrors == before.ClaimErrors {
				break
			}
			if try == 5 {
				return 0, fmt.Errorf("%s counted failed claims during each of %d pairs of probes after the last fault; the pickups prove nothing about NOTIFY", w.id, try)
			}
			s.t.Logf("%s: %d claims failed during the probes after the last fault; the pair is done again", w.id, after.ClaimErrors-before.ClaimErrors)
		}
		s.t.Logf("%s: probe pickups after the last fault: %v, then %v", w.id, pickups[0].Round(time.Microsecond), pickups[1].Round(time.Microsecond))
		if pickups[1] > pickupBound {
			return 0, fmt.Errorf("%s picked up its second probe %v after its enqueue; NOTIFY would have woken it well within %v (PollInterval %v)",
				w.id, pickups[1], pickupBound, workerPoll)
		}
		longest = max(longest, pickups[1])
	}
	return longest, nil
}

// probePickup enqueues a probe for sl's worker id, waits until it is
// handled, and returns how long after its enqueue its receipt was written.
func (s *soak) probePickup(ctx context.Context, sl *slot, id string) (time.Duration, error) {
	probe, err := s.enqueueProbe(ctx, sl)
	if err != nil {
		return 0, err
	}
	if err := poll(ctx, recoverBound, id+" to handle probe "+probe, func(ctx context.Context) (bool, error) {
		return s.handledBy(ctx, probe, id)
	}); err != nil {
		return 0, err
	}
	var secs float64
	if err := s.admin.QueryRowContext(ctx, `SELECT extract(epoch FROM s.at - e.created_at)
		FROM `+sinkTable+` AS s JOIN `+s.store.QualifiedTable()+` AS e ON e.event_id = s.event_id
		WHERE s.event_id = $1 ORDER BY s.id LIMIT 1`, probe).Scan(&secs); err != nil {
		return 0, fmt.Errorf("read the pickup of probe %s: %w", probe, err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// stopWorkers sends every worker SIGTERM and checks that each exits with
// status 0, within stopBound, with its final counters.
func (s *soak) stopWorkers() {
	var wg sync.WaitGroup
	for _, sl := range s.slots {
		s.mu.Lock()
		w := sl.w
		s.mu.Unlock()
		wg.Go(func() {
			if err := w.terminate(stopBound); err != nil {
				s.failf("stopping the workers: %v", err)
			}
		})
	}
	wg.Wait()
}
