package framework_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// Greeting is the arguments of the greet kind.
type Greeting struct {
	Name string `json:"name"`
}

// Greet is declared once, for the code that enqueues it and the worker.
var Greet = lease.Kind[Greeting]{Name: "greet.typed", Queue: "greetings", Priority: 1}

// A typed kind: enqueued from a Go value, handled as a Go value. The first
// attempt snoozes (not a failure), the second completes.
func ExampleHandleKind() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, done := exampleWorker(ctx, "_kind", framework.Config{ // as in Example
		Queues: []framework.Queue{{Name: "greetings", Concurrency: 1}}, PollInterval: 10 * time.Millisecond,
	})
	defer done()
	err := framework.HandleKind(w, Greet, func(ctx context.Context, c *leasework.Claim, g Greeting) error {
		if c.Attempt == 1 {
			fmt.Printf("attempt 1: snooze %s's greeting\n", g.Name)
			return leasework.Snooze(0)
		}
		fmt.Printf("attempt %d: hello %s (queue %s, priority %d)\n", c.Attempt, g.Name, c.Queue, c.Priority)
		stop()
		return nil
	}, framework.KindOptions{Timeout: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := w.Store().DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := Greet.Enqueue(ctx, w.Store(), tx, Greeting{Name: "Ada"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	c := w.Counters()
	fmt.Println("snoozed:", c.Snoozed, "completed:", c.Completed, "retried:", c.Retried)
	// Output:
	// attempt 1: snooze Ada's greeting
	// attempt 2: hello Ada (queue greetings, priority 1)
	// snoozed: 1 completed: 1 retried: 0
}
