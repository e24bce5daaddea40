package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

const kindOrderPlaced = "order.placed"

// The supervisor passes a worker process its settings through these.
const (
	envRole   = "LEASEWORK_EXAMPLE_ROLE"
	envDSN    = "LEASEWORK_EXAMPLE_DSN"
	envSchema = "LEASEWORK_EXAMPLE_SCHEMA"
	envName   = "LEASEWORK_EXAMPLE_WORKER"
	envDriver = "LEASEWORK_EXAMPLE_DRIVER"
	envLease  = "LEASEWORK_EXAMPLE_LEASE"
	envCrash  = "LEASEWORK_EXAMPLE_CRASH"
)

// crashExitCode is the status of the worker that crashes on purpose.
const crashExitCode = 3

// workerMain runs one worker process until SIGTERM.
func workerMain() int {
	name := os.Getenv(envName)
	leaseFor, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] bad lease: %v\n", name, err)
		return 2
	}
	crash, _ := strconv.ParseBool(os.Getenv(envCrash))
	drv := driverNamed(os.Getenv(envDriver))
	db, err := drv.Open(os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %v\n", name, err)
		return 1
	}
	defer db.Close()

	w, err := framework.New(db, drv, framework.Config{
		Schema:       os.Getenv(envSchema),
		WorkerID:     name,
		Concurrency:  2,
		Lease:        leaseFor,
		PollInterval: 200 * time.Millisecond,
		Retention:    -1, // keep DONE rows, so the summary can show them
		// Warnings and errors only: the handler prints each event itself.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %v\n", name, err)
		return 1
	}
	var handled atomic.Int64
	err = w.Register(kindOrderPlaced, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		n := handled.Add(1)
		fmt.Printf("[%s] %s %s event=%s generation=%d attempt=%d\n",
			name, c.Kind, c.Key, c.EventID, c.Generation, c.Attempt)
		if crash && n == 2 {
			fmt.Printf("[%s] crashing now, holding event=%s generation=%d; its lease runs out in %v\n",
				name, c.EventID, c.Generation, leaseFor)
			os.Exit(crashExitCode) // really exit: no outcome is written, the claim stays INPROGRESS
		}
		select { // some work
		case <-time.After(150 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}), framework.RetryPolicy{InitialInterval: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %v\n", name, err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "[%s] %v\n", name, err)
		return 1
	}
	c := w.Counters()
	fmt.Printf("[%s] stopped: claimed %d (%d after an expired lease), completed %d\n", name, c.Claimed, c.Reclaimed, c.Completed)
	return 0
}
