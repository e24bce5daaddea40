// Command orders is a workflow of checkpointed steps that survives its
// worker being killed: an "order.placed" handler reserves stock, charges the
// card and ships, each a named step (framework.StepTx, framework.Step), and
// releases the reservation when the card is declined. See README.md.
//
// It places four orders (one with a card the payment provider declines) and
// runs them in a worker process that it kills with SIGKILL while the
// orders stand at chosen points between their steps, restarting a worker
// after each kill. Then it prints, per order, the steps as recorded with
// the event and the effects counted in their tables: each once.
//
// With no -dsn and no $LEASEWORK_DSN it starts a throwaway PostgreSQL from
// the local server binaries and removes it at the end. It uses the
// repository's test rigs (the throwaway server, and the fixture that ends a
// dead worker's leases at once instead of waiting them out); the workflow
// to copy is workflow.go.
//
//	go run ./examples/orders
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the program's flags.
type options struct {
	dsn     string
	schema  string
	timeout time.Duration
}

func main() {
	if os.Getenv(envRole) == roleWorker {
		os.Exit(workerMain())
	}
	var o options
	flag.StringVar(&o.dsn, "dsn", "", "PostgreSQL URL (default $LEASEWORK_DSN, else a throwaway server)")
	flag.StringVar(&o.schema, "schema", "leasework_example_orders", "schema for the events and the example's tables (dropped and recreated)")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "orders: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if o.timeout <= 0 {
		fmt.Fprintf(os.Stderr, "orders: -timeout is %v; want a positive duration\n", o.timeout)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		stop()
		os.Exit(1)
	}
}
