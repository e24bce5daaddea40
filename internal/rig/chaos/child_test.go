//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/internal/tune"
)

// A worker process is the test binary run again with these set.
const (
	childWorkerEnv = "LEASEWORK_CHAOS_WORKER" // the worker id, also its application_name
	childDSNEnv    = "LEASEWORK_CHAOS_DSN"    // through the worker's proxy
	childDriverEnv = "LEASEWORK_CHAOS_DRIVER" // "pgx" or "pq"
	childSlotEnv   = "LEASEWORK_CHAOS_SLOT"   // which probe kind and queue it serves
	childRunsEnv   = "LEASEWORK_CHAOS_RUNS"   // the file its handler runs are appended to
)

// The workers' configuration. PollInterval is long on purpose: a pickup
// well under it shows that a notification woke the worker (see
// finalProbes). Nothing else waits for it: every queue's claim loop is
// woken by each notification, and the schedule's firings (every second)
// send one. The lease is short, so that a fault's claims are taken over
// soon, but its renewals come every 3s: a worker's statements are then
// bounded by 3s (framework's statement timeout is RenewEvery): room for a
// loaded machine, whose connection start-ups can take longer than 1s (the
// drivers then keep a start-up its statement stopped waiting for, for the
// next statement: internal/netdial.KeepLate).
const (
	workerLease       = 6 * time.Second
	workerRenewEvery  = 3 * time.Second
	workerPoll        = 30 * time.Second
	workerGrace       = 2 * time.Second
	workerStopTimeout = 2 * time.Second
	counterEvery      = 200 * time.Millisecond
)

// The workers' queues and their handler slots.
var workerQueues = []framework.Queue{{Name: "default", Concurrency: 8}, {Name: bulkQueue, Concurrency: 4}}

const (
	bulkQueue  = "bulk" // paused and resumed during the faults
	probeSlots = 2
)

// workerMaxConns caps a worker's pool: a connection per handler slot, and
// the worker's own.
var workerMaxConns = 8 + 4 + probeSlots + framework.ReservedConns

// The soak's event kinds.
const (
	plainKind  = "plain"  // writes a receipt into the sink, outside the claim's transaction
	txKind     = "tx"     // Transactional: its effect commits with its completion
	snoozyKind = "snoozy" // snoozes, then fails once, under a retry policy with an attempt cap
	tickKind   = "tick"   // the schedule's
	tickName   = "beat"
	tickEvery  = time.Second
)

// What payloads ask of the handlers.
const (
	payloadOK     = "ok"
	payloadFail   = "fail"   // a permanent error: the event must end FAILED
	payloadFlaky  = "flaky"  // fails on its first attempt, then succeeds
	payloadHold   = "hold"   // runs until its context ends (a cancel), or holdFor
	payloadRetry  = "retry:" // + ms: asks, on its first attempt, for a retry after that delay
	payloadSnooze = "snooze:"
	failText      = "soak: the event asked to fail"
	transientText = "soak: a transient failure"
)

// holdFor bounds a plain "hold" handler: longer than a renewal's period,
// so that it is renewed; txHoldFor a Transactional one's, shorter than
// the first renewal comes, so that a cancel lands while its transaction
// is open and its completion is still to come.
const (
	holdFor   = 4 * time.Second
	txHoldFor = 250 * time.Millisecond
)

// attemptTimeout bounds every attempt. A blackholed connection is never
// found dead by TCP through the loopback proxy (the kernel acknowledges
// every segment), as it would be within about 30s on a network
// (TCP_USER_TIMEOUT): without a bound, a handler's statement sent on one
// would wait for ever while its claim is renewed, and its event, with the
// events of its key behind it, would never finish.
const attemptTimeout = 20 * time.Second

// The retry policies: exact delays (no randomization), so that the history
// can check them. The snoozy kind's cap counts attempts that are not
// snoozes.
var (
	soakPolicy   = framework.RetryPolicy{InitialInterval: 40 * time.Millisecond, Multiplier: 2, MaxInterval: 2 * time.Second, RandomizationFactor: -1}
	snoozyPolicy = framework.RetryPolicy{InitialInterval: 40 * time.Millisecond, Multiplier: 2, MaxInterval: 2 * time.Second, RandomizationFactor: -1, MaxAttempts: 3}
)

// probeKind is the kind, and probeQueue the queue, that only the worker of
// one slot serves: a queue of its own, so that no other event's lease
// shortens its claim loop's wait (see finalProbes).
func probeKind(slot int) string  { return "probe-" + strconv.Itoa(slot) }
func probeQueue(slot int) string { return "probe-" + strconv.Itoa(slot) }

// The workers of the first splitSlots slots (both drivers) write a batch
// of outcomes whose completions take turns as two statements at once from
// splitFrom outcomes on, as a worker with more slots does from 128: with
// a dozen slots, no batch grows that large. The last slot's worker keeps
// the default. Short runs split 17 to 36 batches (three runs).
const (
	splitSlots = 3
	splitFrom  = 2
)

// workerCounters is what a worker process prints of itself: its
// framework.Counters, and the batches it wrote in two.
type workerCounters struct {
	framework.Counters
	SplitWrites int64
}

// Lines a worker process prints on stdout.
const (
	countersLine = "counters " // a snapshot of its workerCounters, as JSON, every counterEvery
	finalLine    = "final "    // its counters after Run returned, on SIGTERM
)

// runWorker is a worker process: it runs a framework.Worker until SIGTERM,
// printing its counters as it goes and once more at the end. It returns the
// process's exit status.
func runWorker(id string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "worker %s: %v\n", id, err)
		return 1
	}
	slot, err := strconv.Atoi(os.Getenv(childSlotEnv))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", childSlotEnv, err))
	}
	var drv leasework.Driver
	for _, d := range pgtest.Drivers {
		if d.Name == os.Getenv(childDriverEnv) {
			drv = d.New()
		}
	}
	if drv == nil {
		return fail(fmt.Errorf("%s=%q names no driver", childDriverEnv, os.Getenv(childDriverEnv)))
	}
	runs, err := os.OpenFile(os.Getenv(childRunsEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fail(err)
	}
	defer runs.Close()
	db, err := drv.Open(os.Getenv(childDSNEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(workerMaxConns)
	db.SetMaxIdleConns(workerMaxConns) // database/sql keeps 2 by default: a connection set up again for nearly every statement
	queues := append(append([]framework.Queue(nil), workerQueues...), framework.Queue{Name: probeQueue(slot), Concurrency: probeSlots})
	w, err := framework.New(db, drv, framework.Config{
		Schema: soakSchema, WorkerID: id, Queues: queues, Concurrency: 8,
		Lease: workerLease, RenewEvery: workerRenewEvery, PollInterval: workerPoll, Retention: -1,
		GracePeriod: workerGrace, StopTimeout: workerStopTimeout, AttemptTimeout: attemptTimeout,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fail(err)
	}
	var splits atomic.Int64
	if slot < splitSlots {
		tune.SplitFrom(w, splitFrom, func(int) { splits.Add(1) })
	}
	h := &handler{db: db, worker: id, rec: &recorder{f: runs}}
	for _, k := range []struct {
		kind   string
		h      leasework.Handler
		policy framework.RetryPolicy
	}{
		{plainKind, leasework.HandlerFunc(h.plain), soakPolicy},
		{txKind, framework.Transactional(h.tx), soakPolicy},
		{snoozyKind, leasework.HandlerFunc(h.snoozy), snoozyPolicy},
		{tickKind, leasework.HandlerFunc(h.simple), soakPolicy},
		{probeKind(slot), leasework.HandlerFunc(h.simple), soakPolicy},
		{edgeKind, leasework.HandlerFunc(h.simple), soakPolicy},
	} {
		if err := w.Register(k.kind, k.h, k.policy); err != nil {
			return fail(err)
		}
	}
	if err := w.Schedule(framework.Periodic{Name: tickName, Schedule: "@every " + tickEvery.String(), Kind: tickKind}); err != nil {
		return fail(err)
	}

	// The library never takes signals over; a program does.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var out sync.Mutex
	report := func(prefix string) {
		b, err := json.Marshal(workerCounters{Counters: w.Counters(), SplitWrites: splits.Load()})
		if err != nil {
			panic(err)
		}
		out.Lock()
		defer out.Unlock()
		fmt.Printf("%s%s\n", prefix, b)
	}
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		tick := time.NewTicker(counterEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				report(countersLine)
			}
		}
	}()
	err = w.Run(ctx)
	<-printed
	if err != nil {
		return fail(err)
	}
	if w.Counters().HungHandlers > 0 {
		// Where they hang, for the soak's report.
		buf := make([]byte, 1<<20)
		fmt.Fprintf(os.Stderr, "worker %s stopped with hung handlers; its goroutines:\n%s\n", id, buf[:runtime.Stack(buf, true)])
	}
	report(finalLine)
	return 0
}

// runLine is one line of a worker's runs file: a handler's start, or its
// end with what it returned.
type runLine struct {
	T      string `json:"t"` // "start" or "end"
	Row    int64  `json:"row"`
	Gen    int64  `json:"gen"`
	Event  string `json:"ev,omitempty"`
	Kind   string `json:"kind,omitempty"`
	At     int64  `json:"at"` // wall clock, Unix nanoseconds
	Result string `json:"result,omitempty"`
	Delay  int64  `json:"delay,omitempty"` // nanoseconds, of a snooze or a RetryAfter
	Err    string `json:"err,omitempty"`
	Value  string `json:"value,omitempty"` // a step's result got back: the generation that ran it ("g3")
}

// recorder appends a worker's handler runs to its file, one write per
// line: what the kernel has is kept when the process is killed.
type recorder struct {
	f *os.File
}

func (r *recorder) write(l runLine) {
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "record a handler run: %v\n", err)
	}
}

// start records a handler's start and returns the function that records
// its end with what it returns: call it just before returning err.
func (r *recorder) start(c *leasework.Claim) func(err error) error {
	r.write(runLine{T: "start", Row: c.ID, Gen: c.Generation, Event: c.EventID, Kind: c.Kind, At: time.Now().UnixNano()})
	return func(err error) error {
		l := runLine{T: "end", Row: c.ID, Gen: c.Generation, At: time.Now().UnixNano(), Result: "ok"}
		var snooze *leasework.SnoozeError
		var after *leasework.RetryAfterError
		switch {
		case err == nil:
		case leasework.IsPermanent(err):
			l.Result = "fail"
		case errors.As(err, &snooze):
			l.Result, l.Delay = "snooze", int64(snooze.Delay)
		case errors.As(err, &after):
			l.Result, l.Delay = "retry-after", int64(after.Delay)
		default:
			l.Result = "error"
		}
		if err != nil {
			l.Err = err.Error()
		}
		r.write(l)
		return err
	}
}

// handler holds the soak's handlers. The plain ones write a receipt into
// the sink table in a statement of their own, as a call to an external
// system would be made: outside the claim's transaction, never rolled back
// by the claim.
type handler struct {
	db     *sql.DB
	worker string
	rec    *recorder
}

// plain runs a plain event as its payload asks, after its step.
func (h *handler) plain(ctx context.Context, c *leasework.Claim) error {
	end := h.rec.start(c)
	if err := h.step(ctx, c); err != nil {
		return end(err)
	}
	if err := h.asked(ctx, c, holdFor); err != nil {
		return end(err)
	}
	return end(h.receipt(ctx, c))
}

// tx is the Transactional kind's body: its effect is written in the
// handler's transaction, with which the worker then completes the claim.
// Its end is recorded before it returns, so before the completion and the
// commit.
func (h *handler) tx(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
	end := h.rec.start(c)
	if err := h.asked(ctx, c, txHoldFor); err != nil {
		return end(err)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+effectsTable+` (event_id, row_id, generation, worker)
		VALUES ($1, $2, $3, $4)`, c.EventID, c.ID, c.Generation, h.worker)
	return end(err)
}

// step runs the plain kind's step (history.StepName) with framework.Step:
// its result names the generation that ran it. It records in the runs
// file whether this run got the step back from its claim (and whose it
// was) or ran it: a flaky event's first attempt runs it and fails, and
// its second must get it back; a killed or stopped worker's attempt may
// have recorded it before its row was taken over.
func (h *handler) step(ctx context.Context, c *leasework.Claim) error {
	if v, ok := c.Steps[history.StepName]; ok {
		var got string
		if err := json.Unmarshal(v, &got); err != nil {
			return leasework.Permanent(fmt.Errorf("soak: the step's record %q: %w", v, err))
		}
		h.rec.write(runLine{T: "step-read", Row: c.ID, Gen: c.Generation, At: time.Now().UnixNano(), Value: got})
	}
	_, err := framework.Step(ctx, history.StepName, func(context.Context) (string, error) {
		h.rec.write(runLine{T: "step-ran", Row: c.ID, Gen: c.Generation, At: time.Now().UnixNano()})
		return "g" + strconv.FormatInt(c.Generation, 10), nil
	})
	return err
}

// snoozy snoozes for as many first attempts as its payload says
// ("snooze:<n>:<ms>"), fails the attempt after, and succeeds after that.
func (h *handler) snoozy(ctx context.Context, c *leasework.Claim) error {
	end := h.rec.start(c)
	var n, delayMS int
	if _, err := fmt.Sscanf(string(c.Payload), payloadSnooze+"%d:%d", &n, &delayMS); err != nil {
		return end(leasework.Permanent(fmt.Errorf("soak: payload %q: %w", c.Payload, err)))
	}
	switch {
	case c.Attempt <= n:
		return end(leasework.Snooze(time.Duration(delayMS) * time.Millisecond))
	case c.Attempt == n+1:
		return end(errors.New(transientText))
	}
	return end(h.receipt(ctx, c))
}

// simple writes a receipt: the schedule's firings and the probes.
func (h *handler) simple(ctx context.Context, c *leasework.Claim) error {
	end := h.rec.start(c)
	return end(h.receipt(ctx, c))
}

// asked does what the payload asks before the handler's work, and returns
// the error the handler must return, if any. A hold waits until the
// context ends, or hold.
func (h *handler) asked(ctx context.Context, c *leasework.Claim, hold time.Duration) error {
	p := string(c.Payload)
	switch {
	case p == payloadFail:
		return leasework.Permanent(errors.New(failText))
	case p == payloadFlaky && c.Attempt == 1:
		return errors.New(transientText)
	case strings.HasPrefix(p, payloadRetry) && c.Attempt == 1:
		ms, err := strconv.Atoi(strings.TrimPrefix(p, payloadRetry))
		if err != nil {
			return leasework.Permanent(fmt.Errorf("soak: payload %q: %w", p, err))
		}
		return leasework.RetryAfter(errors.New(transientText), time.Duration(ms)*time.Millisecond)
	case p == payloadHold && c.Kind == plainKind:
		return h.holdWithSteps(ctx, c, hold)
	case p == payloadHold:
		return wait(ctx, hold)
	}
	// A little work, so that claims are held for a while: up to 19ms.
	return wait(ctx, time.Duration(c.ID%20)*time.Millisecond)
}

// holdEvery is how often a plain handler's hold records a step.
const holdEvery = 250 * time.Millisecond

// holdWithSteps is a plain handler's hold: a long job that records a step
// ("hold-1", "hold-2" …) every holdEvery, as a job records where it got
// to. A worker stopped during a hold and resumed after its rows were
// taken over may record one before it learns so: the database must refuse
// it (steps).
func (h *handler) holdWithSteps(ctx context.Context, c *leasework.Claim, hold time.Duration) error {
	for n, left := 1, hold; left > 0; n++ {
		d := min(holdEvery, left)
		if err := wait(ctx, d); err != nil {
			return err
		}
		left -= d
		if _, err := framework.Step(ctx, "hold-"+strconv.Itoa(n), func(context.Context) (string, error) {
			return "g" + strconv.FormatInt(c.Generation, 10), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// wait waits d, and returns the context's cause if it ends first.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// receiptTimeout bounds a receipt's write, as a handler bounds its call to
// an external system. It matters when the write's connection is
// blackholed: on a real network the drivers' TCP keepalives and
// TCP_USER_TIMEOUT end such a call within about 30s, but through a
// loopback proxy the kernel acknowledges every segment and never notices,
// and the handler's context has no deadline of its own. Without this
// bound the handler would wait forever while the worker renews its claim
// (the soak saw it: a pgx handler blocked reading the INSERT's reply, its
// row INPROGRESS with a live lease minutes later).
const receiptTimeout = 5 * time.Second

// The handler returns when its context ends, whether or not the write
// has: lib/pq answers a context that ended with a cancel request, then
// waits for the statement's reply on its connection, which a blackhole
// through the proxy never delivers; the handler would outlive its attempt
// and the worker, counted as hung (the soak saw it, a lib/pq worker
// blackholed at the end of the faults). The write left behind may still
// commit, as a call to an external system may take effect after its
// caller gave up: the history allows a receipt of an attempt that ended
// with an error, as it does one a pgx write made just before its
// connection was closed.
func (h *handler) receipt(ctx context.Context, c *leasework.Claim) error {
	ctx, cancel := context.WithTimeout(ctx, receiptTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.db.ExecContext(ctx, `INSERT INTO `+sinkTable+` (event_id, row_id, generation, worker)
			VALUES ($1, $2, $3, $4)`, c.EventID, c.ID, c.Generation, h.worker)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("soak: receipt of %s: %w", c.EventID, context.Cause(ctx))
	}
}
