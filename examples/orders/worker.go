package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
)

// The supervisor runs each worker as this program again, with these set.
const (
	envRole   = "LEASEWORK_ORDERS_ROLE" // roleWorker
	envDSN    = "LEASEWORK_ORDERS_DSN"
	envSchema = "LEASEWORK_ORDERS_SCHEMA"
	envName   = "LEASEWORK_ORDERS_WORKER"
	envRound  = "LEASEWORK_ORDERS_ROUND" // index in killPlan, or len(killPlan) for the last worker
)

const roleWorker = "worker"

// workerLease is the workers' lease: how long a dead worker's claims would
// wait before another worker could take them, had the supervisor not
// expired them at once.
const workerLease = 30 * time.Second

// workerMain runs one worker process until SIGTERM, or until it is killed.
// Each order whose round of killPlan names a point stops there and waits:
// the process says so on stdout, and the supervisor kills it.
func workerMain() int {
	name := os.Getenv(envName)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "[%s] %v\n", name, err)
		return 1
	}
	round, err := strconv.Atoi(os.Getenv(envRound))
	if err != nil || round < 0 || round > len(killPlan) {
		return fail(fmt.Errorf("bad %s %q", envRound, os.Getenv(envRound)))
	}
	// The supervisor holds our stdin open: when it goes away, so do we,
	// rather than wait at a kill point for good.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()

	drv := lwpgx.New()
	db, err := drv.Open(os.Getenv(envDSN))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	w, err := framework.New(db, drv, framework.Config{
		Schema:       os.Getenv(envSchema),
		WorkerID:     name,
		Concurrency:  len(demoOrders), // every order at once: each one reaches its kill point
		Lease:        workerLease,
		PollInterval: 100 * time.Millisecond,
		Retention:    -1, // keep DONE rows, and their steps, for the summary
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fail(err)
	}

	var mu sync.Mutex
	say := func(c *leasework.Claim, o Order, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("[%s] order %s generation %d: %s\n", name, o.ID, c.Generation, fmt.Sprintf(format, args...))
	}
	wf := newWorkflow(db, os.Getenv(envSchema))
	wf.note = say
	if round < len(killPlan) {
		plan := killPlan[round]
		wf.pause = func(ctx context.Context, c *leasework.Claim, o Order, at point) error {
			if plan[o.ID] != at {
				return nil
			}
			say(c, o, "parked %s; waiting to be killed", at) // the supervisor's cue
			<-ctx.Done()
			return context.Cause(ctx)
		}
	}
	err = framework.HandleKind(w, orderPlaced, wf.handle, framework.KindOptions{
		Policy: framework.RetryPolicy{InitialInterval: 200 * time.Millisecond},
	})
	if err != nil {
		return fail(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		return fail(err)
	}
	c := w.Counters()
	fmt.Printf("[%s] stopped gracefully: claimed %d (%d after a dead worker's lease), completed %d, failed %d\n",
		name, c.Claimed, c.Reclaimed, c.Completed, c.Failed)
	return 0
}
