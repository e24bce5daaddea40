//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

// What a run does, and its limits.
type soakConfig struct {
	name      string
	perKind   int           // faults of each kind
	meanGap   time.Duration // between two faults' starts
	minEvents int           // events acknowledged, at least
	rate      int           // events enqueued per second
	bound     time.Duration // the whole run; reaching it fails the soak
}

var (
	// shortSoak is CI's: a few faults of each kind, a couple of thousand
	// events, well under two minutes with -race.
	shortSoak = soakConfig{name: "short", perKind: 4, meanGap: 600 * time.Millisecond,
		minEvents: 2000, rate: 60, bound: 15 * time.Minute}
	// longSoak is LEASEWORK_SOAK=long's: at least 250 faults of each kind.
	longSoak = soakConfig{name: "long", perKind: 260, meanGap: 500 * time.Millisecond,
		minEvents: 20000, rate: 40, bound: 55 * time.Minute}
)

const (
	soakEnv    = "LEASEWORK_SOAK"       // "long" for the long run
	seedEnv    = "LEASEWORK_SOAK_SEED"  // replays a run's schedule
	traceEnv   = "LEASEWORK_SOAK_TRACE" // set: log every fault as it is done
	numWorkers = 4

	// maxAttempts is the events' budget: far above the claims a fault
	// costs an event, so that no event ends FAILED that did not ask to.
	maxAttempts = 50

	// drainBound bounds the wait, after the last fault, for every event to
	// finish: retries and expired leases are found by the next poll
	// (PollInterval, 10s) at worst.
	drainBound = 3 * time.Minute

	// stopBound bounds a worker's exit after SIGTERM: Run returns within
	// GracePeriod + StopTimeout; the rest is slack for a loaded machine.
	stopBound = workerGrace + workerStopTimeout + 10*time.Second

	// pickupBound bounds the pickup of the second of two probes in a row
	// (see finalProbes): no poll can find it that soon.
	pickupBound = workerLease / 2
)

// soak is one run.
type soak struct {
	t      *testing.T
	seed   uint64
	cfg    soakConfig
	trace  bool
	admin  *sql.DB      // the test's checks and fixtures, straight to the server
	store  *lease.Store // the enqueuer's, straight to the server
	cancel context.CancelFunc

	mu              sync.Mutex
	slots           []*slot
	all             []*worker // every worker process started
	faults          [numFaults]int
	recovery        [numFaults]time.Duration // the longest recovery after each kind
	stopsReclaimed  int                      // stops during which another worker re-claimed a row
	stopsIdle       int                      // stops of a worker that held nothing, after tries
	terminateMisses int                      // terminates that hit no LISTEN connection: not counted, done again
	redo            []fault                  // faults to do again after the schedule
	acked           map[string]string        // event id → payload, of enqueues whose commit returned
	unknown         int                      // events of enqueues whose commit failed: they may exist
	finished        bool                     // the test is over: nothing more is reported
	aborted         bool                     // a failure ended the run

	claimErrorsBeforeProbes map[string]int64 // worker id → its ClaimErrors before finalProbes
}

func TestSoak(t *testing.T) {
	cfg := shortSoak
	if os.Getenv(soakEnv) == "long" {
		cfg = longSoak
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
	}
	t.Logf("soak (%s): seed=%d (replay its schedule with %s=%d)", cfg.name, seed, seedEnv, seed)
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
	s := &soak{t: t, seed: seed, cfg: cfg, trace: os.Getenv(traceEnv) != "", cancel: cancel,
		acked: map[string]string{}, claimErrorsBeforeProbes: map[string]int64{}}
	t.Cleanup(s.cleanup)
	if err := s.setup(ctx); err != nil {
		t.Fatalf("soak seed=%d: %v", seed, err)
	}

	start := time.Now()
	injected := make(chan struct{})
	enqueued := make(chan struct{})
	go func() {
		defer close(enqueued)
		s.enqueueLoop(ctx, injected)
	}()
	s.inject(ctx)
	close(injected)
	<-enqueued
	if ctx.Err() == context.DeadlineExceeded {
		s.failf("the run did not end within %v", bound)
	}
	if t.Failed() {
		return
	}
	faulted := time.Since(start)
	if err := s.drain(ctx); err != nil {
		t.Fatalf("soak seed=%d: %v", seed, err)
	}
	pickup, err := s.finalProbes(ctx)
	if err != nil {
		t.Fatalf("soak seed=%d: %v", seed, err)
	}
	s.stopWorkers()
	if t.Failed() {
		return
	}
	s.check(ctx, pickup, faulted, time.Since(start))
}

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

// setup creates the schema, the sink and the audit, and starts the workers.
func (s *soak) setup(ctx context.Context) error {
	pgx := pgtest.Drivers[0].New()
	open := func(app string) (*sql.DB, error) {
		dsn, err := withApp(server.DSN(), app)
		if err != nil {
			return nil, err
		}
		return pgx.Open(dsn)
	}
	var err error
	if s.admin, err = open(adminApp); err != nil {
		return err
	}
	enq, err := open(enqueuerApp)
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
	if _, err := s.store.Migrate(ctx); err != nil {
		return err
	}
	if err := createSinkAndAudit(ctx, s.admin, s.store); err != nil {
		return err
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
	return nil
}

// cleanup ends every worker process still running, whatever state the
// test left it in, and drops the schema.
func (s *soak) cleanup() {
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
		if err := w.wait(processBound); err != nil {
			s.t.Error(err)
		}
	}
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
	if s.store != nil {
		s.store.DB().Close()
	}
}

// enqueueLoop enqueues events at the configured rate, in small
// transactions, until the faults are done and enough events were
// acknowledged. Of every hundred events about four ask to fail and eight
// to fail once.
func (s *soak) enqueueLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 2))
	const every = 100 * time.Millisecond
	per := max(s.cfg.rate*int(every/time.Millisecond)/1000, 1)
	tick := time.NewTicker(every)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case <-injected:
			s.mu.Lock()
			enough := len(s.acked) >= s.cfg.minEvents
			s.mu.Unlock()
			if enough {
				return
			}
		default:
		}
		events := make([]lease.Event, per)
		for i := range events {
			n++
			p := payloadOK
			switch r := rng.IntN(100); {
			case r < 4:
				p = payloadFail
			case r < 12:
				p = payloadFlaky
			}
			events[i] = lease.Event{EventID: "e-" + strconv.Itoa(n), Kind: soakKind, Payload: []byte(p), MaxAttempts: maxAttempts}
		}
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := pgtest.EnqueueCommitted(ectx, s.store, events...)
		cancel()
		s.mu.Lock()
		if err == nil {
			for _, e := range events {
				s.acked[e.EventID] = string(e.Payload)
			}
		} else {
			s.unknown += len(events)
		}
		s.mu.Unlock()
	}
}

// drain waits until every event is finished: no fault happens any more,
// and the workers recovered from every one by themselves.
func (s *soak) drain(ctx context.Context) error {
	err := poll(ctx, drainBound, "every event finished after the last fault", func(ctx context.Context) (bool, error) {
		var n int
		err := s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+s.store.QualifiedTable()+`
			WHERE status NOT IN ('DONE', 'FAILED')`).Scan(&n)
		return n == 0, err
	})
	if err == nil {
		return nil
	}
	rows, qerr := s.admin.QueryContext(ctx, `SELECT id, event_id, status, generation, attempt, COALESCE(worker, ''),
			COALESCE(lease_until::text, ''), next_attempt_at::text, COALESCE(last_error, '')
		FROM `+s.store.QualifiedTable()+` WHERE status NOT IN ('DONE', 'FAILED') ORDER BY id LIMIT 20`)
	if qerr != nil {
		return fmt.Errorf("%w (and reading the unfinished rows: %v)", err, qerr)
	}
	defer rows.Close()
	var b strings.Builder
	holders := map[string]bool{}
	for rows.Next() {
		var id, gen, attempt int64
		var eventID, status, worker, leaseUntil, next, lastError string
		if err := rows.Scan(&id, &eventID, &status, &gen, &attempt, &worker, &leaseUntil, &next, &lastError); err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n  row %d %s: %s generation %d attempt %d worker %q lease_until %s next_attempt_at %s last_error %q",
			id, eventID, status, gen, attempt, worker, leaseUntil, next, lastError)
		holders[worker] = status == "INPROGRESS"
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
// as soon as A's receipt is in, probe B, of a kind only it serves. Having
// claimed A alone, fewer rows than its free slots, a worker waits
// PollInterval (10s) before it polls again; only a wakeup can make it claim
// B sooner: a notification, or its listener connecting again (which shows
// LISTEN works too). An empty claim in between would at most shorten that
// wait to A's lease (2s), and a failed claim is tried again sooner (so
// stopWorkers checks that no claim failed since). So B picked up within
// pickupBound (1s) of its enqueue was woken by NOTIFY.
func (s *soak) finalProbes(ctx context.Context) (time.Duration, error) {
	var longest time.Duration
	for _, sl := range s.slots {
		s.mu.Lock()
		id := sl.w.id
		s.mu.Unlock()
		// Its claim errors so far; the snapshot is at most counterEvery
		// old, so it can only count fewer.
		c, _ := sl.w.snapshot()
		s.mu.Lock()
		s.claimErrorsBeforeProbes[id] = c.ClaimErrors
		s.mu.Unlock()
		var pickups [2]time.Duration
		for i := range pickups {
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
				return 0, err
			}
			pickups[i] = time.Duration(secs * float64(time.Second))
		}
		s.t.Logf("%s: probe pickups after the last fault: %v, then %v", id, pickups[0].Round(time.Microsecond), pickups[1].Round(time.Microsecond))
		if pickups[1] > pickupBound {
			return 0, fmt.Errorf("%s picked up its second probe %v after its enqueue; NOTIFY would have woken it well within %v (PollInterval %v)",
				id, pickups[1], pickupBound, workerPoll)
		}
		longest = max(longest, pickups[1])
	}
	return longest, nil
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
				s.failf("%v", err)
				return
			}
			c, _ := w.snapshot()
			s.mu.Lock()
			before := s.claimErrorsBeforeProbes[w.id]
			s.mu.Unlock()
			if c.ClaimErrors != before {
				s.failf("worker %s: %d claims failed during the final probes, after every fault; the pickups prove nothing about NOTIFY then",
					w.id, c.ClaimErrors-before)
			}
		})
	}
	wg.Wait()
}

// eventRow is an events row as check reads it.
type eventRow struct {
	kind, status, payload, lastError string
	attempt                          int
	receipts                         int  // in the sink
	finalReceipt                     bool // one from the row's final claim: its generation and worker
}

// check asserts the database's facts and prints the soak's line.
func (s *soak) check(ctx context.Context, pickup, faulted, total time.Duration) {
	t := s.t
	fail := func(format string, args ...any) {
		t.Errorf("soak seed=%d: "+format, append([]any{s.seed}, args...)...)
	}
	events := s.store.QualifiedTable()
	rows, err := s.admin.QueryContext(ctx, `SELECT e.event_id, e.kind, e.status, convert_from(e.payload, 'UTF8'),
			COALESCE(e.last_error, ''), e.attempt,
			(SELECT count(*) FROM `+sinkTable+` AS s WHERE s.event_id = e.event_id),
			EXISTS (SELECT 1 FROM `+sinkTable+` AS s
				WHERE s.event_id = e.event_id AND s.generation = e.generation AND s.worker = e.worker)
		FROM `+events+` AS e`)
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]eventRow{}
	for rows.Next() {
		var id string
		var r eventRow
		if err := rows.Scan(&id, &r.kind, &r.status, &r.payload, &r.lastError, &r.attempt, &r.receipts, &r.finalReceipt); err != nil {
			t.Fatal(err)
		}
		table[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()

	var soakEvents, duplicates, lost, maxAttempt, failedAsked int
	var wrong []string
	for id, r := range table {
		maxAttempt = max(maxAttempt, r.attempt)
		duplicates += max(r.receipts-1, 0)
		if r.kind == soakKind {
			soakEvents++
		}
		asked := r.kind == soakKind && r.payload == payloadFail
		switch {
		case r.status == "DONE" && !asked && r.receipts > 0 && r.finalReceipt:
		case r.status == "FAILED" && asked && r.lastError == failText:
			failedAsked++
		default:
			wrong = append(wrong, fmt.Sprintf("%s (%s, payload %q): %s, attempt %d, receipts %d (one from its final claim: %v), last error %q",
				id, r.kind, r.payload, r.status, r.attempt, r.receipts, r.finalReceipt, r.lastError))
		}
	}
	s.mu.Lock()
	acked, unknown := len(s.acked), s.unknown
	for id := range s.acked {
		r, ok := table[id]
		if !ok || (r.status != "DONE" && r.status != "FAILED") || (r.status == "DONE" && r.receipts == 0) {
			lost++
		}
	}
	faults, recovery := s.faults, s.recovery
	stopsReclaimed, stopsIdle, terminateMisses := s.stopsReclaimed, s.stopsIdle, s.terminateMisses
	all := s.all
	s.mu.Unlock()
	if len(wrong) > 0 {
		fail("%d events did not end as asked (DONE with a receipt from the final claim, or FAILED when the payload asks), e.g.:\n  %s",
			len(wrong), strings.Join(wrong[:min(len(wrong), 20)], "\n  "))
	}

	// The audit of accepted writes.
	var staleAccepted, exhausted, badClaims, parentOutcomes, claims, outcomes, renewals int
	err = s.admin.QueryRowContext(ctx, `SELECT
			count(*) FILTER (WHERE op IN ('outcome', 'renew') AND writer NOT IN ($1, $2)
				AND (writer IS DISTINCT FROM owner OR NOT lease_live OR new_generation <> old_generation)),
			count(*) FILTER (WHERE op = 'exhausted'),
			count(*) FILTER (WHERE op = 'claim' AND writer NOT IN ($1, $2)
				AND (writer IS DISTINCT FROM claimant OR new_generation <= old_generation)),
			count(*) FILTER (WHERE writer IN ($1, $2) AND op <> 'renew'),
			count(*) FILTER (WHERE op = 'claim'),
			count(*) FILTER (WHERE op = 'outcome'),
			count(*) FILTER (WHERE op = 'renew' AND writer NOT IN ($1, $2))
		FROM `+auditTable, adminApp, enqueuerApp).Scan(&staleAccepted, &exhausted, &badClaims, &parentOutcomes, &claims, &outcomes, &renewals)
	if err != nil {
		t.Fatal(err)
	}
	if staleAccepted > 0 {
		fail("%d stale writes accepted (a renewal or outcome from a session not the row's claimant, after its lease, or changing its generation):\n%s",
			staleAccepted, s.auditRows(ctx, `op IN ('outcome', 'renew') AND writer NOT IN ($1, $2)
				AND (writer IS DISTINCT FROM owner OR NOT lease_live OR new_generation <> old_generation)`))
	}
	if exhausted > 0 {
		fail("%d rows ended FAILED on a spent attempt budget (%d); raise maxAttempts or look at why:\n%s",
			exhausted, maxAttempts, s.auditRows(ctx, `op = 'exhausted' AND writer NOT IN ($1, $2)`))
	}
	if badClaims > 0 {
		fail("%d claims written by a session other than the claimant it names, or not raising the generation:\n%s",
			badClaims, s.auditRows(ctx, `op = 'claim' AND writer NOT IN ($1, $2) AND (writer IS DISTINCT FROM claimant OR new_generation <= old_generation)`))
	}
	if parentOutcomes > 0 {
		fail("the test itself wrote %d claims or outcomes; its only writes should be the lease fixture's:\n%s",
			parentOutcomes, s.auditRows(ctx, `writer IN ($1, $2) AND op <> 'renew'`))
	}
	// Each row's final state: written by its last accepted outcome write,
	// at the generation of its last claim, by that claim's worker.
	var finalWrong int
	var finalExamples strings.Builder
	frows, err := s.admin.QueryContext(ctx, `WITH o AS (
			SELECT DISTINCT ON (row_id) row_id, new_status, old_generation, owner, writer
			FROM `+auditTable+` WHERE op IN ('outcome', 'exhausted') ORDER BY row_id, id DESC
		), c AS (
			SELECT DISTINCT ON (row_id) row_id, new_generation, claimant
			FROM `+auditTable+` WHERE op = 'claim' ORDER BY row_id, id DESC
		)
		SELECT e.id, e.status, e.generation, COALESCE(e.worker, ''),
			COALESCE(o.new_status, ''), COALESCE(o.old_generation, -1), COALESCE(o.owner, ''), COALESCE(o.writer, ''),
			COALESCE(c.new_generation, -1), COALESCE(c.claimant, '')
		FROM `+events+` AS e LEFT JOIN o ON o.row_id = e.id LEFT JOIN c ON c.row_id = e.id
		WHERE o.row_id IS NULL OR c.row_id IS NULL
			OR o.new_status <> e.status OR o.old_generation <> e.generation
			OR o.owner IS DISTINCT FROM e.worker OR o.writer IS DISTINCT FROM e.worker
			OR c.new_generation <> e.generation OR c.claimant IS DISTINCT FROM e.worker
		ORDER BY e.id`)
	if err != nil {
		t.Fatal(err)
	}
	for frows.Next() {
		var id, gen, ogen, cgen int64
		var status, worker, ostatus, owner, writer, claimant string
		if err := frows.Scan(&id, &status, &gen, &worker, &ostatus, &ogen, &owner, &writer, &cgen, &claimant); err != nil {
			t.Fatal(err)
		}
		finalWrong++
		if finalWrong <= 20 {
			fmt.Fprintf(&finalExamples, "\n  row %d: %s at generation %d, claimed by %q; last outcome write %q at generation %d, owner %q, writer %q; last claim generation %d by %q",
				id, status, gen, worker, ostatus, ogen, owner, writer, cgen, claimant)
		}
	}
	if err := frows.Err(); err != nil {
		t.Fatal(err)
	}
	frows.Close()
	if finalWrong > 0 {
		fail("%d rows whose final state was not written by their last claim (its generation and its worker):%s", finalWrong, finalExamples.String())
	}

	// The workers' own figures: the last each printed.
	var sum framework.Counters
	for _, w := range all {
		c, _ := w.snapshot()
		sum.Claimed += c.Claimed
		sum.Reclaimed += c.Reclaimed
		sum.ClaimErrors += c.ClaimErrors
		sum.StaleRejections += c.StaleRejections
		sum.OutcomesReplayed += c.OutcomesReplayed
		sum.LeasesLost += c.LeasesLost
		sum.LocalLeaseTimeouts += c.LocalLeaseTimeouts
		sum.Panics += c.Panics
		sum.HungHandlers += c.HungHandlers
		sum.OutcomesAbandoned += c.OutcomesAbandoned
	}
	if sum.Panics > 0 || sum.HungHandlers > 0 {
		var b strings.Builder
		for _, w := range all {
			if c, _ := w.snapshot(); c.Panics > 0 || c.HungHandlers > 0 {
				fmt.Fprintf(&b, "\n%s: %d panics, %d hung handlers; the end of its output:\n%s", w.id, c.Panics, c.HungHandlers, w.tail.last(tailBytes/2))
			}
		}
		fail("the workers counted %d handler panics and %d hung handlers; want none:%s", sum.Panics, sum.HungHandlers, b.String())
	}
	if lost > 0 {
		fail("%d acknowledged events lost: missing, unfinished, or DONE without a receipt", lost)
	}

	t.Logf("soak details: %s faults in %v, all done in %v; %d workers started; events acknowledged %d, of enqueues that failed %d (in the table or not), FAILED as asked %d; highest attempt %d; "+
		"stops with a row re-claimed %d, of idle workers %d; terminates that missed the listener and were done again %d; longest recovery kill %v stop %v terminate %v blackhole %v restart %v; "+
		"audit: claims %d, outcomes %d, renewals %d; workers' counters: claimed %d, reclaimed %d, claim errors %d, leases lost %d (local timeouts %d), outcomes replayed %d, outcomes abandoned %d",
		s.cfg.name, faulted.Round(time.Second), total.Round(time.Second), len(all), acked, unknown, failedAsked, maxAttempt,
		stopsReclaimed, stopsIdle, terminateMisses, recovery[faultKill].Round(time.Millisecond), recovery[faultStop].Round(time.Millisecond),
		recovery[faultTerminate].Round(time.Millisecond), recovery[faultBlackhole].Round(time.Millisecond), recovery[faultRestart].Round(time.Millisecond),
		claims, outcomes, renewals, sum.Claimed, sum.Reclaimed, sum.ClaimErrors, sum.LeasesLost, sum.LocalLeaseTimeouts, sum.OutcomesReplayed, sum.OutcomesAbandoned)
	t.Logf("soak: seed=%d events=%d kill=%d stop=%d terminate=%d blackhole=%d restart=%d duplicates=%d stale_rejected=%d stale_accepted=%d lost=%d pickup_after_restart=%v",
		s.seed, soakEvents, faults[faultKill], faults[faultStop], faults[faultTerminate], faults[faultBlackhole], faults[faultRestart],
		duplicates, sum.StaleRejections, staleAccepted, lost, pickup.Round(time.Millisecond))
	for f, n := range faults {
		if n != s.cfg.perKind {
			fail("%d %v faults done; want %d", n, fault(f), s.cfg.perKind)
		}
	}
}

// auditRows formats up to 20 audit rows matching where ($1 and $2 are the
// test's application names), for a failure message.
func (s *soak) auditRows(ctx context.Context, where string) string {
	rows, err := s.admin.QueryContext(ctx, `SELECT id, row_id, op, old_status, new_status, old_generation, new_generation,
			COALESCE(owner, ''), COALESCE(claimant, ''), writer, lease_live, at::text
		FROM `+auditTable+` WHERE `+where+` ORDER BY id LIMIT 20`, adminApp, enqueuerApp)
	if err != nil {
		return "(reading the audit: " + err.Error() + ")"
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, row, og, ng int64
		var op, oldStatus, newStatus, owner, claimant, writer, at string
		var live bool
		if err := rows.Scan(&id, &row, &op, &oldStatus, &newStatus, &og, &ng, &owner, &claimant, &writer, &live, &at); err != nil {
			return "(reading the audit: " + err.Error() + ")"
		}
		fmt.Fprintf(&b, "  audit %d row %d: %s %s→%s generation %d→%d owner %q claimant %q writer %q lease live %v at %s\n",
			id, row, op, oldStatus, newStatus, og, ng, owner, claimant, writer, live, at)
	}
	return b.String()
}
