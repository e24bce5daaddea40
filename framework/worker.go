package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"
)

// Worker claims events of its registered kinds and runs their handlers. Make
// one with [New], register handlers with [Worker.Register], then call
// [Worker.Run] once. Its methods are safe for concurrent use.
type Worker struct {
	cfg   Config
	store *lease.Store
	log   *slog.Logger
	count counters

	mu      sync.Mutex
	kinds   map[string]*kind
	started bool
	live    map[leasework.Ref]*attempt // claims held, until their outcome is written
	running int                        // handlers running

	stopNow     chan struct{} // closed by StopNow
	stopNowOnce sync.Once
	listening   chan struct{} // closed once notifications are being received
	listenOnce  sync.Once
	wake        chan struct{} // a notification or a freed slot; capacity 1
	slotFreed   chan struct{} // capacity 1
	outcomes    chan outcome  // handler results for the outcome writer

	// Set by Run before any of its goroutines start.
	dbCtx          context.Context // for statements: ends only when Run returns
	handlerCtx     context.Context // parent of every attempt's context
	cancelHandlers context.CancelCauseFunc
	handlers       *pool.Pool
	kindList       []string
}

// kind is one registered handler with its retry policy.
type kind struct {
	name    string
	handler leasework.Handler
	policy  RetryPolicy
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
	return &Worker{
		cfg:       cfg,
		store:     store,
		log:       cfg.Logger.With("worker", cfg.WorkerID),
		kinds:     map[string]*kind{},
		live:      map[leasework.Ref]*attempt{},
		stopNow:   make(chan struct{}),
		listening: make(chan struct{}),
		wake:      make(chan struct{}, 1),
		slotFreed: make(chan struct{}, 1),
		outcomes:  make(chan outcome, cfg.Concurrency),
	}, nil
}

// Store returns the store the worker runs on, for enqueueing, migrating and
// inspecting rows.
func (w *Worker) Store() *lease.Store { return w.store }

// ID returns the worker's id, as written in the rows it claims.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Register sets the handler and retry policy for events of one kind. The
// zero RetryPolicy takes the defaults documented on its fields. It returns
// an error, and registers nothing, when kind is empty or already
// registered, h is nil, the policy is invalid, or Run has started.
func (w *Worker) Register(kindName string, h leasework.Handler, policy RetryPolicy) error {
	if kindName == "" {
		return errors.New("framework: Register: kind is empty")
	}
	if h == nil {
		return fmt.Errorf("framework: Register %q: handler is nil", kindName)
	}
	policy, err := policy.normalize()
	if err != nil {
		return fmt.Errorf("framework: Register %q: %w", kindName, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("framework: Register %q: the worker is already running", kindName)
	}
	if _, dup := w.kinds[kindName]; dup {
		return fmt.Errorf("framework: Register %q: kind is already registered", kindName)
	}
	w.kinds[kindName] = &kind{name: kindName, handler: h, policy: policy}
	return nil
}

// Run claims and handles events until ctx ends, then stops gracefully:
//
//  1. it stops claiming;
//  2. it lets running handlers finish for up to Config.GracePeriod (or
//     until [Worker.StopNow] is called);
//  3. it cancels the contexts of handlers still running, with cause
//     leasework.ErrShutdown, and waits for them to return;
//  4. it records every outcome, and releases the claims of handlers that
//     gave up because of the shutdown back to READY (giving back the attempt),
//     so another worker picks them up at once instead of waiting out the
//     lease.
//
// Run returns nil after a stop, and no goroutine it started outlives it. It
// returns an error at once when no handler is registered or when called a
// second time. Database errors do not end Run: it logs them and tries
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
	w.handlerCtx, w.cancelHandlers = context.WithCancelCause(base)
	w.handlers = pool.New().WithMaxGoroutines(w.cfg.Concurrency)
	claimCtx, stopClaiming := context.WithCancel(ctx)
	renewCtx, stopRenewing := context.WithCancel(base)
	defer stopClaiming()
	defer stopRenewing()
	select {
	case <-w.stopNow: // StopNow came first: claim nothing
		stopClaiming()
	default:
	}
	w.log.Info("worker started", "kinds", w.kindList, "concurrency", w.cfg.Concurrency, "lease", w.cfg.Lease)

	var claimers, background conc.WaitGroup
	outcomesDone := make(chan struct{})
	background.Go(func() { w.renewLoop(renewCtx) })
	background.Go(func() { defer close(outcomesDone); w.writeOutcomes() })
	claimers.Go(func() { w.dispatch(claimCtx) })
	claimers.Go(func() { w.listen(claimCtx) })
	claimers.Go(func() { w.retain(claimCtx) })
	claimers.Go(func() {
		select {
		case <-w.stopNow:
			stopClaiming()
		case <-claimCtx.Done():
		}
	})

	claimers.Wait() // ctx ended or StopNow: nothing claims any more
	w.log.Info("worker stopping", "running", w.runningCount())
	w.drain()
	w.handlers.Wait()
	close(w.outcomes)
	<-outcomesDone
	stopRenewing()
	background.Wait()
	w.log.Info("worker stopped")
	return nil
}

// StopNow cancels every running handler at once, with cause
// leasework.ErrShutdown, and makes Run stop without waiting out the grace
// period. It returns at once; Run returns when the handlers have returned
// and their outcomes are written. Calling it before Run, or more than once,
// is allowed: a Run started after StopNow stops at once.
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
	w.started = true
	for k := range w.kinds {
		w.kindList = append(w.kindList, k)
	}
	slices.Sort(w.kindList)
	return nil
}

// drain waits for running handlers for up to the grace period, then cancels
// those still running.
func (w *Worker) drain() {
	if w.cfg.GracePeriod > 0 && w.runningCount() > 0 {
		grace := time.NewTimer(w.cfg.GracePeriod)
		defer grace.Stop()
	wait:
		for w.runningCount() > 0 {
			select {
			case <-w.slotFreed:
			case <-grace.C:
				break wait
			case <-w.stopNow:
				break wait
			}
		}
	}
	w.cancelHandlers(leasework.ErrShutdown)
}

func (w *Worker) runningCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

// statementTimeout bounds one statement, so that a hung connection is
// noticed well within a lease.
func (w *Worker) statementTimeout() time.Duration {
	return max(w.cfg.RenewEvery, time.Second)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
