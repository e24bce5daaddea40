//lint:file-ignore SA4006 the snippet leaves errors unchecked, as its guide shows it

package pgx_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters.
var _ = []any{enqueueInPgxTx}

// enqueueInPgxTx enqueues in a pgx transaction, with a worker on the
// application's pgxpool (docs/store.md, "Enqueue from a pgx transaction").
func enqueueInPgxTx(ctx context.Context, dsn string, body []byte) error {
	pool, err := pgxpool.New(ctx, dsn) // the application's pool
	db := stdlib.OpenDBFromPool(pool)  // database/sql over it, for the worker
	w, err := framework.New(db, lwpgx.New(), framework.Config{})
	// ... Register handlers, go w.Run(ctx) ...

	tx, err := pool.Begin(ctx)
	defer tx.Rollback(ctx)
	// ... your business writes in tx ...
	_, err = w.Store().EnqueueTx(ctx, lwpgx.WrapTx(tx), lease.EnqueueOptions{},
		lease.Event{EventID: "order-42-placed", Kind: "order.placed", Payload: body})
	err = tx.Commit(ctx) // the event exists, and workers are woken, exactly when the business write commits
	return err
}
