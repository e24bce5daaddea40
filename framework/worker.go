package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
	"github.com/sourcegraph/conc"
)

// Worker claims events of its registered kinds and runs their handlers. Make
// one with [New], register handlers with [Worker.Register], then call
// [Worker.Run] once. Its methods are safe for concurrent use.
type Worker struct {
	cfg   Config
	store *lease.Store
	log   *slog.Logger
	count counters

	mu       sync.Mutex
	kinds    map[string]*kind
	started  bool
	stopped  bool                       // Run is returning: no attempt starts any more
	stopping bool                       // Run stopped claiming: no claim begins, no completion takes a turn
	claiming sync.WaitGroup             // the claims begun before stopping, until they return
	live     map[leasework.Ref]*attempt // claims held, until their outcome is written
	queues   []*queue                   // the queues served, as Config.Queues
	sched    scheduler                  // periodic schedules (Schedule), under mu until Run

	stopNow         chan struct{} // closed by StopNow
	stopNowOnce     sync.Once
	listening       chan struct{} // closed once notifications are being received
	listenOnce      sync.Once
	handlerReturned chan struct{} // for the stop; capacity 1
	outcomes        *outcomeQueue // handler results for the outcome writer
	steps           *stepBatcher  // the handlers' step records (Step)
	txTurns         chan struct{} // a Transactional handler's turn to open a transaction; set by start

	// Set by Run before any of its goroutines start.
	dbCtx          context.Context // for statements: ends only when Run returns
	handlerCtx     context.Context // parent of every attempt's context
	cancelHandlers context.CancelCauseFunc
	kindList       []string

	middleware []Middleware // Use's, in order; applied by start
	observers  []Observer   // the worker's own (ownObserver), then Observe's, in order

	claimReturned func(queue string, n int, err error) // a test's hook, after each claim statement
	splitWrite    func(outcomes int)                   // a test's hook, before a batch taking turns is written in two halves
	splitFrom     int                                  // when not 0, the size from which such a batch is (internal/tune)
	byKind        kindMetrics                          // per kind and queue, for MetricsHandler
}

// kind is one registered handler with its retry policy.
type kind struct {
	name    string
	handler leasework.Handler
	run     leasework.Handler // handler inside the worker's middleware; set by start
	policy  RetryPolicy
	timeout time.Duration // per attempt; zero: Config.AttemptTimeout
}

// New returns a worker for the events table named by cfg in the database
// behind db, reached through drv. It validates cfg and does not touch the
// database; create the table first with lease.Store.Migrate (through
// [Worker.Store], say).
func New(db *sql.DB, drv leasework.Driver, cfg Config) (*Worker, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	store, err := lease.New(db, drv, lease.Options{Schema: cfg.Schema, Table: cfg.Table})
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	queues := make([]*queue, len(cfg.Queues))
	for i, q := range cfg.Queues {
		queues[i] = newQueue(q)
	}
	w := &Worker{
		cfg:             cfg,
		queues:          queues,
		store:           store,
		log:             cfg.Logger.With("worker", cfg.WorkerID),
		kinds:           map[string]*kind{},
		live:            map[leasework.Ref]*attempt{},
		stopNow:         make(chan struct{}),
		listening:       make(chan struct{}),
		handlerReturned: make(chan struct{}, 1),
		outcomes:        newOutcomeQueue(),
		steps:           &stepBatcher{store: store, timeout: cfg.statementTimeout()},
	}
	w.observers = []Observer{w.ownObserver()}
	return w, nil
}

// Store returns the store the worker runs on, for enqueueing, migrating and
// inspecting rows.
func (w *Worker) Store() *lease.Store { return w.store }

// ID returns the worker's id, as written in the rows it claims.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Register sets the handler and retry policy for events of one kind. The
// zero RetryPolicy takes the defaults documented on its fields. It returns
// an error, and registers nothing, when the kind is not one that events
// can carry (see lease.ValidateKind: empty, not UTF-8, a NUL byte, too
// long) or is already registered, when h is nil or holds a nil func or
// pointer (a nil HandlerFunc, say), when the policy is out of its limits,
// or when Run has started.
func (w *Worker) Register(kindName string, h leasework.Handler, policy RetryPolicy) error {
	return w.RegisterWith(kindName, h, KindOptions{Policy: policy})
}

// KindOptions are a kind's settings, given at registration.
type KindOptions struct {
	// Policy is the kind's retry policy; see [RetryPolicy].
	Policy RetryPolicy
	// Timeout bounds each attempt of the kind, as Config.AttemptTimeout
	// does for every kind (the handler's context ends with cause
	// leasework.ErrAttemptTimeout). Zero means Config.AttemptTimeout; at
	// most MaxAttemptTimeout.
	Timeout time.Duration
}

// RegisterWith is [Worker.Register] with the kind's options. It refuses
// what Register refuses, and a Timeout out of range.
func (w *Worker) RegisterWith(kindName string, h leasework.Handler, opts KindOptions) error {
	if err := lease.ValidateKind(kindName); err != nil {
		return fmt.Errorf("framework: Register %q: %w", kindName, err)
	}
	if isNilHandler(h) {
		return fmt.Errorf("framework: Register %q: handler is nil (%T)", kindName, h)
	}
	policy, err := opts.Policy.normalize()
	if err != nil {
		return fmt.Errorf("framework: Register %q: %w", kindName, err)
	}
	if opts.Timeout < 0 || opts.Timeout > MaxAttemptTimeout {
		return fmt.Errorf("framework: Register %q: KindOptions.Timeout is %v; it must be between 0 (Config.AttemptTimeout) and %v", kindName, opts.Timeout, MaxAttemptTimeout)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("framework: Register %q: the worker is already running", kindName)
	}
	if _, dup := w.kinds[kindName]; dup {
		return fmt.Errorf("framework: Register %q: kind is already registered", kindName)
	}
	w.kinds[kindName] = &kind{name: kindName, handler: h, policy: policy, timeout: opts.Timeout}
	return nil
}

// isNilHandler reports whether h is nil, or a nil value of a type that
// could only panic when called: a nil func (HandlerFunc(nil)), pointer,
// map, channel, slice or interface.
func isNilHandler(h leasework.Handler) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	switch v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.UnsafePointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Run claims and handles events until ctx ends, then stops:
//
//  1. it stops claiming, and its completions of keyed events no longer
//     take their keys' next events (see Outcomes in the package doc):
//     those are left READY for the next claim;
//  2. it lets running handlers finish for up to Config.GracePeriod (or
//     until [Worker.StopNow] is called), going on as soon as the last
//     returns;
//  3. it cancels the contexts of handlers still running, with cause
//     leasework.ErrShutdown, and waits up to Config.StopTimeout for them
//     to return and for every outcome to be written; the claims of
//     handlers that gave up because of the shutdown are released back to
//     READY (giving back the attempt), so another worker picks them up at
//     once instead of waiting out the lease;
//  4. it returns, even if a handler has not returned by then: such a
//     handler ignores its context, and its claim is neither renewed nor
//     released. The claim expires and another worker takes the event over,
//     with the attempt counted against the row's budget. Such handlers are
//     counted in Counters.HungHandlers and logged with their ids. Outcomes
//     not written by the last tenth of StopTimeout (at most its last
//     500ms), because the database is away, say, are given up before Run
//     returns: counted in Counters.OutcomesAbandoned (and
//     RerunsFromAbandonedOutcomes), their claims left to expire, and their
//     events run again.
//
// So Run returns at most GracePeriod + StopTimeout after ctx ends, and at
// most StopTimeout after StopNow, whatever the handlers and the database do.
// A Go goroutine cannot be killed: a handler that ignores its context is
// still running after Run returns, and so is any goroutine stuck in a
// driver that ignores its context. Whatever such a handler does later is
// harmless: its outcome is dropped, and its claim is past its lease. In
// every other case no goroutine Run started outlives it.
//
// Run returns an error at once when no handler is registered or when called
// a second time. Database errors do not end Run: it logs them and tries
// again, and a claim it cannot renew is given up before its lease expires.
//
// Values of ctx reach the handlers' contexts; its cancellation does not
// (handlers are cancelled as described above).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.start(); err != nil {
		return err
	}
	base := context.WithoutCancel(ctx)
	w.dbCtx = base
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(context.WithValue(base, handlerBaseKey{}, true))
	claimCtx, stopClaiming := context.WithCancel(ctx)
	renewCtx, stopRenewing := context.WithCancel(base)
	defer stopClaiming()
	defer stopRenewing()
	select {
	case <-w.stopNow: // StopNow came first: claim nothing
		stopClaiming()
	default:
	}
	w.log.Info("worker started", "kinds", w.kindList, "queues", w.cfg.Queues, "lease", w.cfg.Lease)

	renewed := goDone(func() { w.renewLoop(renewCtx) })
	written := goDone(w.writeOutcomes)
	dispatched := goDone(func() {
		var loops conc.WaitGroup
		for _, q := range w.queues {
			loops.Go(func() { w.dispatch(claimCtx, q) })
		}
		loops.Wait()
	})
	var others conc.WaitGroup
	others.Go(func() { w.listen(claimCtx) })
	others.Go(func() { w.retain(claimCtx) })
	others.Go(func() { w.runSchedules(claimCtx) })
	othersDone := goDone(others.Wait)

	select {
	case <-claimCtx.Done():
	case <-w.stopNow:
		stopClaiming()
	}
	w.mu.Lock()
	w.stopping = true // no claim begins; a turn is a claim: no completion takes one any more
	w.mu.Unlock()
	graceEnd := time.Now().Add(w.cfg.GracePeriod)
	w.log.Info("worker stopping", "running", w.runningCount())
	w.awaitHandlers(dispatched, graceEnd, true)
	// A claim begun before the stop (a sweep's, or the loop's woken as the
	// stop came) has its handlers started, and cancelled and released
	// with the others, before any is released: a claim that ran after a
	// release would take the row back for a worker about to exit.
	if !waitUntil(goDone(w.claiming.Wait), time.Now().Add(w.cfg.StopTimeout/2)) {
		w.log.Warn("worker stopping with a claim still in flight", "stop_timeout", w.cfg.StopTimeout)
	}
	w.cancelHandlers(leasework.ErrShutdown)
	hardEnd := time.Now().Add(w.cfg.StopTimeout)
	// The last outcomes need time to be written: a statement's timeout, at
	// most half of the stop's.
	w.awaitHandlers(dispatched, hardEnd.Add(-min(w.cfg.statementTimeout(), w.cfg.StopTimeout/2)), false)
	// The outcome writer stops writing a little before the end, so that it
	// has given up what is left (counted, its observers told) when Run
	// returns.
	w.stopAttempts(hardEnd.Add(-min(w.cfg.StopTimeout/10, 500*time.Millisecond)))
	if !waitUntil(written, hardEnd) {
		w.log.Warn("worker stopping with an outcome write still in flight", "stop_timeout", w.cfg.StopTimeout)
	}
	stopRenewing()
	ok := waitUntil(renewed, hardEnd) && waitUntil(dispatched, hardEnd) && waitUntil(othersDone, hardEnd)
	if !ok {
		w.log.Warn("worker stopped with a database call still in flight", "stop_timeout", w.cfg.StopTimeout)
	}
	w.log.Info("worker stopped")
	return nil
}

// StopNow cancels every running handler at once, with cause
// leasework.ErrShutdown, and makes Run stop without waiting out the grace
// period. It returns at once; Run returns when the handlers have returned
// and their outcomes are written, or Config.StopTimeout after StopNow at the
// latest. Calling it before Run, or more than once, is allowed: a Run
// started after StopNow stops at once.
func (w *Worker) StopNow() {
	w.stopNowOnce.Do(func() { close(w.stopNow) })
}

func (w *Worker) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("framework: Run: the worker has already run; make a new one")
	}
	if len(w.kinds) == 0 {
		return errors.New("framework: Run: no handler is registered")
	}
	runs := make(map[string]leasework.Handler, len(w.kinds))
	for name, k := range w.kinds {
		run, err := w.wrap(name, k.handler)
		if err != nil {
			return err
		}
		runs[name] = run
	}
	w.started = true
	turns := w.cfg.TxConcurrency
	if capped := w.store.DB().Stats().MaxOpenConnections; capped > 0 && turns > capped-ReservedConns {
		turns = max(capped-ReservedConns, 1)
		w.log.Info("Transactional handlers share a capped pool: at most this many transactions open at once",
			"tx_concurrency", turns, "max_open_conns", capped, "reserved", ReservedConns)
	}
	w.txTurns = make(chan struct{}, turns)
	for name, k := range w.kinds {
		w.kindList = append(w.kindList, name)
		k.run = runs[name]
	}
	slices.Sort(w.kindList)
	return nil
}

// awaitHandlers waits until no handler runs and the claim loop has
// returned (a claim in flight starts handlers), or until the deadline, or,
// when stopNow is set, until StopNow is called.
func (w *Worker) awaitHandlers(dispatched <-chan struct{}, deadline time.Time, stopNow bool) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var cut <-chan struct{}
	if stopNow {
		cut = w.stopNow
	}
	for {
		if dispatched != nil {
			select {
			case <-dispatched:
				dispatched = nil // closed: a nil channel never fires below
			default:
			}
		}
		if dispatched == nil && w.runningCount() == 0 {
			return
		}
		select {
		case <-w.handlerReturned:
		case <-dispatched:
		case <-t.C:
			return
		case <-cut:
			return
		}
	}
}

// stopAttempts ends the worker's run: no attempt starts any more, the
// outcome writer writes what is queued until deadline, and the claims of
// handlers still running are left to expire.
func (w *Worker) stopAttempts(deadline time.Time) {
	w.mu.Lock()
	w.stopped = true
	var hung []*attempt
	for _, a := range w.live {
		a.mu.Lock()
		if !a.ended {
			hung = append(hung, a)
		}
		a.mu.Unlock()
	}
	w.mu.Unlock()
	w.outcomes.close(deadline)
	for _, a := range hung {
		a.abandon()
	}
}

// goDone runs f in a goroutine and returns a channel closed when it returns.
func goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// waitUntil waits for done until deadline, and reports whether it closed.
func waitUntil(done <-chan struct{}, deadline time.Time) bool {
	select {
	case <-done:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// runningCount is how many handlers run, in every queue.
func (w *Worker) runningCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, q := range w.queues {
		n += q.running
	}
	return n
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
