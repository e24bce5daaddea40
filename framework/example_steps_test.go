package framework_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// A handler made of steps resumes after its last finished one: the first
// attempt reserves and charges, then fails to ship; the second gets the
// reservation and the charge back, decoded, without running those steps
// again, and ships. The row keeps each step with the generation of the
// attempt that recorded it, and the handler's output.
func ExampleStep() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, done := exampleWorker(ctx, "_steps", framework.Config{ // as in Example
		Concurrency: 1, PollInterval: framework.MinPollInterval,
	})
	defer done()

	type reservation struct {
		SKU string
		N   int
	}
	policy := framework.RetryPolicy{InitialInterval: framework.MinPollInterval}
	err := w.Register("order.fulfil", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		r, err := framework.Step(ctx, "reserve", func(ctx context.Context) (reservation, error) {
			fmt.Printf("attempt %d: reserve\n", c.Attempt)
			return reservation{SKU: "sku-7", N: 2}, nil
		})
		if err != nil {
			return err
		}
		charge, err := framework.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			fmt.Printf("attempt %d: charge\n", c.Attempt)
			return "ch_1", nil
		})
		if err != nil {
			return err
		}
		tracking, err := framework.Step(ctx, "ship", func(ctx context.Context) (string, error) {
			fmt.Printf("attempt %d: ship %d of %s, paid by %s\n", c.Attempt, r.N, r.SKU, charge)
			if c.Attempt == 1 {
				return "", errors.New("carrier unavailable") // nothing recorded: runs again
			}
			return "track-9", nil
		})
		if err != nil {
			return err
		}
		stop() // a graceful stop: this attempt still completes
		return framework.RecordOutput(ctx, []byte(tracking))
	}), policy)
	if err != nil {
		log.Fatal(err)
	}

	tx, err := w.Store().DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	enqueued, err := w.Store().Enqueue(ctx, tx, lease.Event{Kind: "order.fulfil", EventID: "order-42"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}

	row, err := w.Store().Get(context.Background(), enqueued[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("event %s, output %q\n", row.Status, row.Output)
	for _, st := range row.Steps { // in the order recorded
		fmt.Printf("step %s by generation %d: %s\n", st.Name, st.Generation, st.Value)
	}
	// Output:
	// attempt 1: reserve
	// attempt 1: charge
	// attempt 1: ship 2 of sku-7, paid by ch_1
	// attempt 2: ship 2 of sku-7, paid by ch_1
	// event DONE, output "track-9"
	// step reserve by generation 1: {"SKU":"sku-7","N":2}
	// step charge by generation 1: "ch_1"
	// step ship by generation 2: "track-9"
}
