package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// exampleDB opens the database named by $LEASEWORK_DSN (the tests' server)
// and returns a schema of the example's own.
func exampleDB() (*sql.DB, string) {
	db, err := pgx.New().Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	return db, "example_" + strconv.Itoa(os.Getpid())
}

// A worker handles events enqueued in the application's own transaction,
// then stops when its context ends.
func Example() {
	db, schema := exampleDB()
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	w, err := framework.New(db, pgx.New(), framework.Config{Schema: schema, Concurrency: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Store().DropSchema(context.Background())
	if _, err := w.Store().Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// The transactional outbox: the events commit with the business write.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = w.Store().Enqueue(ctx, tx,
		lease.Event{Kind: "greet", EventID: "greet-1", Payload: []byte("Ada")},
		lease.Event{Kind: "greet", EventID: "greet-2", Payload: []byte("Grace")})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	handled := 0
	err = w.Register("greet", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		fmt.Printf("hello %s (event %s, generation %d)\n", c.Payload, c.EventID, c.Generation)
		if handled++; handled == 2 {
			stop() // a graceful stop once both are handled
		}
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("completed:", w.Counters().Completed)
	// Output:
	// hello Ada (event greet-1, generation 1)
	// hello Grace (event greet-2, generation 1)
	// completed: 2
}

// A failed attempt is retried under the kind's policy; the next attempt sees
// the error and the progress recorded by the one before.
func ExampleRecordProgress() {
	db, schema := exampleDB()
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	w, err := framework.New(db, pgx.New(), framework.Config{Schema: schema, PollInterval: framework.MinPollInterval})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Store().DropSchema(context.Background())
	if _, err := w.Store().Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := w.Store().Enqueue(ctx, tx, lease.Event{Kind: "import", EventID: "import-1"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	policy := framework.RetryPolicy{InitialInterval: framework.MinPollInterval}
	err = w.Register("import", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		fmt.Printf("attempt %d: resuming after %q, last error %q\n", c.Attempt, c.Progress, c.LastError)
		if c.Attempt == 1 {
			if err := framework.RecordProgress(ctx, []byte("row 500")); err != nil {
				return err
			}
			return errors.New("connection reset")
		}
		stop()
		return nil
	}), policy)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1: resuming after "", last error ""
	// attempt 2: resuming after "row 500", last error "connection reset"
}
