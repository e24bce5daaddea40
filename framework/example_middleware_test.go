package framework_test

import (
	"context"
	"fmt"
	"log"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// Middleware around every handler: here one that says what ran and how it
// ended. Logging, tracing and metrics take the same shape.
func ExampleWorker_Use() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, done := exampleWorker(ctx, "_mw", framework.Config{Concurrency: 1}) // as in Example
	defer done()
	report := func(next leasework.Handler) leasework.Handler {
		return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			err := next.Handle(ctx, c)
			fmt.Printf("%s %s: err=%v\n", c.Kind, c.EventID, err)
			return err
		})
	}
	if err := w.Use(report); err != nil {
		log.Fatal(err)
	}
	err := w.Register("greet", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		fmt.Printf("hello %s\n", c.Payload)
		stop()
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := w.Store().DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := w.Store().Enqueue(ctx, tx, lease.Event{Kind: "greet", EventID: "greet-1", Payload: []byte("Ada")}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// hello Ada
	// greet greet-1: err=<nil>
}
