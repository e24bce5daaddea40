package pgx_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// A service that uses pgx natively enqueues in its own pgx transaction, and
// runs a worker on the same pgxpool.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// The application's pool ($LEASEWORK_DSN: the tests' server).
	pool, err := pgxpool.New(ctx, os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// The worker shares it: database/sql over the same pgxpool. It listens
	// for wakeups on a connection of its own, outside the pool.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	schema := "example_pgx_" + strconv.Itoa(os.Getpid()) // a schema of its own
	w, err := framework.New(db, lwpgx.New(), framework.Config{Schema: schema, Concurrency: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Store().DropSchema(context.Background())
	if _, err := w.Store().Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	err = w.Register("order.placed", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		fmt.Printf("publishing %s: %s\n", c.EventID, c.Payload)
		stop() // a graceful stop once it is handled
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		log.Fatal(err)
	}

	// The business write and the event commit together, in a pgx.Tx.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE orders (id text) ON COMMIT DROP`); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('order-42')`); err != nil {
		log.Fatal(err)
	}
	_, err = w.Store().EnqueueTx(ctx, lwpgx.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{EventID: "order-42-placed", Kind: "order.placed", Key: "order-42", Payload: []byte(`{"total":42}`)})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("completed:", w.Counters().Completed)
	// Output:
	// publishing order-42-placed: {"total":42}
	// completed: 1
}
