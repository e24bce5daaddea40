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
	"sync"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
)

// A worker process is the test binary run again with these set.
const (
	childWorkerEnv = "LEASEWORK_CHAOS_WORKER" // the worker id, also its application_name
	childDSNEnv    = "LEASEWORK_CHAOS_DSN"    // through the worker's proxy
	childDriverEnv = "LEASEWORK_CHAOS_DRIVER" // "pgx" or "pq"
	childSlotEnv   = "LEASEWORK_CHAOS_SLOT"   // which probe kind it serves
)

// The workers' configuration. PollInterval is long on purpose: a pickup
// well under it shows that a notification woke the worker (see
// finalProbes).
const (
	workerLease       = 2 * time.Second
	workerPoll        = 10 * time.Second
	workerConcurrency = 8
	workerMaxConns    = workerConcurrency + framework.ReservedConns
	workerGrace       = 2 * time.Second
	workerStopTimeout = 2 * time.Second
	counterEvery      = 200 * time.Millisecond
)

// The soak's event kind, and what its payloads ask of the handler.
const (
	soakKind      = "soak"
	payloadOK     = "ok"
	payloadFail   = "fail"  // a permanent error: the event must end FAILED
	payloadFlaky  = "flaky" // fails on its first attempt, then succeeds
	failText      = "soak: the event asked to fail"
	transientText = "soak: a transient failure on the first attempt"
)

// probeKind is the kind only the worker of one slot serves.
func probeKind(slot int) string { return "probe-" + strconv.Itoa(slot) }

// Lines a worker process prints on stdout.
const (
	countersLine = "counters " // a snapshot of its framework.Counters, as JSON, every counterEvery
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
	db, err := drv.Open(os.Getenv(childDSNEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(workerMaxConns)
	w, err := framework.New(db, drv, framework.Config{
		Schema: soakSchema, WorkerID: id, Concurrency: workerConcurrency,
		Lease: workerLease, PollInterval: workerPoll, Retention: -1,
		GracePeriod: workerGrace, StopTimeout: workerStopTimeout,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fail(err)
	}
	h := handler{db: db, worker: id}
	retry := framework.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaxInterval: time.Second}
	if err := w.Register(soakKind, leasework.HandlerFunc(h.soak), retry); err != nil {
		return fail(err)
	}
	if err := w.Register(probeKind(slot), leasework.HandlerFunc(h.receipt), retry); err != nil {
		return fail(err)
	}

	// The library never takes signals over; a program does.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var out sync.Mutex
	report := func(prefix string) {
		b, err := json.Marshal(w.Counters())
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

// handler is the soak's handler: it writes a receipt into the sink table,
// in a statement of its own, as a call to an external system would be
// made: outside the claim's transaction, never rolled back by the claim.
type handler struct {
	db     *sql.DB
	worker string
}

func (h handler) soak(ctx context.Context, c *leasework.Claim) error {
	switch string(c.Payload) {
	case payloadFail:
		return leasework.Permanent(errors.New(failText))
	case payloadFlaky:
		if c.Attempt == 1 {
			return errors.New(transientText)
		}
	}
	// A little work, so that claims are held for a while: up to 19ms.
	t := time.NewTimer(time.Duration(c.ID%20) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
	}
	return h.receipt(ctx, c)
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

func (h handler) receipt(ctx context.Context, c *leasework.Claim) error {
	ctx, cancel := context.WithTimeout(ctx, receiptTimeout)
	defer cancel()
	_, err := h.db.ExecContext(ctx, `INSERT INTO `+sinkTable+` (event_id, row_id, generation, worker)
		VALUES ($1, $2, $3, $4)`, c.EventID, c.ID, c.Generation, h.worker)
	return err
}
