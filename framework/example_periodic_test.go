package framework_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

// A schedule enqueues one event per firing, with the event id
// "<name>:<fire time>". Every worker of a fleet may have the same
// schedule: each firing is enqueued once, whichever workers run it and
// however often they restart. This worker starts by enqueueing the latest
// past firing (MissedRunOnce, the default), then one a second.
func ExampleWorker_Schedule() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w, done := exampleWorker(ctx, "_periodic", framework.Config{Concurrency: 1}) // as in Example
	defer done()

	// Also a cron spec, "0 3 * * *" (3am UTC), or a descriptor, "@hourly".
	err := w.Schedule(framework.Periodic{Name: "heartbeat", Schedule: "@every 1s", Kind: "heartbeat"})
	if err != nil {
		log.Fatal(err)
	}
	handled := 0
	err = w.Register("heartbeat", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		name, at, _ := strings.Cut(c.EventID, ":")
		fireTime, err := time.Parse(time.RFC3339, at)
		fmt.Printf("%s fired; its event id names the fire time: %v\n", name, err == nil && fireTime.Nanosecond() == 0)
		if handled++; handled == 2 {
			stop()
		}
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// heartbeat fired; its event id names the fire time: true
	// heartbeat fired; its event id names the fire time: true
}
