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
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// exampleDB opens the database named by $LEASEWORK_DSN (the tests' server)
// and returns a schema of the example's own.
func exampleDB() (*sql.DB, string) {
	db, err := lwpgx.New().Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	return db, "example_" + strconv.Itoa(os.Getpid())
}

// exampleWorker makes a worker with cfg on a table of the example's own
// (suffix names its schema), migrated; done drops the schema and closes
// the pool. These are the steps Example shows.
func exampleWorker(ctx context.Context, suffix string, cfg framework.Config) (w *framework.Worker, done func()) {
	db, schema := exampleDB()
	cfg.Schema = schema + suffix
	w, err := framework.New(db, lwpgx.New(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := w.Store().Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return w, func() {
		w.Store().DropSchema(context.Background())
		db.Close()
	}
}

// A worker handles events enqueued in the application's own transaction,
// then stops when its context ends.
func Example() {
	db, schema := exampleDB()
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	w, err := framework.New(db, lwpgx.New(), framework.Config{Schema: schema, Concurrency: 1})
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

	w, err := framework.New(db, lwpgx.New(), framework.Config{Schema: schema, PollInterval: framework.MinPollInterval})
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

// A handler that writes to the queue's own database completes its claim in
// the same transaction: the first attempt's write is rolled back with its
// failure, and the second attempt's write commits with the completion, so
// the shipment exists exactly once.
func ExampleTransactional() {
	db, schema := exampleDB()
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	w, err := framework.New(db, lwpgx.New(), framework.Config{Schema: schema, Retention: -1, PollInterval: framework.MinPollInterval})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Store().DropSchema(context.Background())
	if _, err := w.Store().Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	shipments := lease.QuoteIdent(schema) + ".shipments"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+shipments+" (order_id text, event_id text)"); err != nil {
		log.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	enqueued, err := w.Store().Enqueue(ctx, tx, lease.Event{Kind: "ship", EventID: "ship-42", Key: "order-42"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	policy := framework.RetryPolicy{InitialInterval: framework.MinPollInterval}
	err = w.Register("ship", framework.Transactional(func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		fmt.Printf("attempt %d: shipping %s\n", c.Attempt, c.Key)
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+shipments+" VALUES ($1, $2)", c.Key, c.EventID); err != nil {
			return err
		}
		if c.Attempt == 1 {
			return errors.New("carrier unavailable") // rolls the insert back
		}
		stop() // a graceful stop: this attempt still commits
		return nil
	}), policy)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM "+shipments).Scan(&n); err != nil {
		log.Fatal(err)
	}
	row, err := w.Store().Get(context.Background(), enqueued[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("shipments: %d; event %s; completed: %d\n", n, row.Status, w.Counters().Completed)
	// Output:
	// attempt 1: shipping order-42
	// attempt 2: shipping order-42
	// shipments: 1; event DONE; completed: 1
}
