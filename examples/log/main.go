// Command log is leasework's multi-process demonstration: several worker
// processes share one table, and with -crash one of them exits holding
// claims that another takes over once their leases run out. It uses the
// repository's test rigs; the program to copy into your own module is
// examples/quickstart.
//
// It writes orders and their "order.placed" events in the same transaction
// (the transactional outbox), starts worker processes that log each event
// with its event id and generation, waits until every event is DONE, stops
// the workers gracefully and prints a summary.
//
// With no -dsn and no $LEASEWORK_DSN it starts a throwaway PostgreSQL from
// the local server binaries and removes it at the end.
//
// With -crash, one worker process exits in the middle of a handler, holding
// its claim. Its lease runs out (-lease, 2s by default) and another worker
// claims the same event again, with generation 2.
//
//	go run ./examples/log
//	go run ./examples/log -crash
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	dsn      string
	driver   string
	events   int
	workers  int
	crash    bool
	lease    time.Duration
	schema   string
	deadline time.Duration
	out      io.Writer // the supervisor's and the workers' output
}

func main() {
	o := options{out: os.Stdout}
	flag.StringVar(&o.dsn, "dsn", "", "PostgreSQL URL (default $LEASEWORK_DSN, else a throwaway server)")
	flag.StringVar(&o.driver, "driver", "pgx", "database driver: pgx or pq")
	flag.IntVar(&o.events, "events", 12, "orders (and events) to write")
	flag.IntVar(&o.workers, "workers", 3, "worker processes to run")
	flag.BoolVar(&o.crash, "crash", false, "make one worker process exit while it holds a claim")
	flag.DurationVar(&o.lease, "lease", 2*time.Second, "lease of each claim")
	flag.StringVar(&o.schema, "schema", "leasework_example_log", "schema for the example's tables (dropped and recreated)")
	flag.DurationVar(&o.deadline, "timeout", 2*time.Minute, "give up after this long")
	flag.Parse()

	if os.Getenv(envRole) == "worker" {
		os.Exit(workerMain())
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "log:", err)
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "log:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.driver != "pgx" && o.driver != "pq":
		return fmt.Errorf("-driver is %q; want pgx or pq", o.driver)
	case o.events < 1:
		return fmt.Errorf("-events is %d; want at least 1", o.events)
	case o.workers < 1 || (o.crash && o.workers < 2):
		return fmt.Errorf("-workers is %d; want at least 1, and 2 with -crash (one crashes, another recovers)", o.workers)
	case o.lease < 100*time.Millisecond:
		return fmt.Errorf("-lease is %v; want at least 100ms", o.lease)
	case o.deadline <= 0:
		return fmt.Errorf("-timeout is %v; want a positive duration", o.deadline)
	}
	return nil
}
