package pgx

import (
	"context"
	"errors"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/leasework/leasework/lease"
)

// Enqueue inserts events in tx, a transaction the application opened with
// pgx itself (pgx.Conn.Begin, pgxpool.Pool.Begin), so that they commit with
// its business writes or not at all: the transactional outbox for services
// that use pgx natively. It is store.Enqueue for a pgx.Tx, with the same
// checks, the same statement and the same results: the events become visible
// to workers when tx commits, and the table's trigger wakes listening workers
// then; they vanish if tx rolls back.
//
// The store may use either driver: its table, its default attempt budget and
// its statements are used; its pool is not. An event id that already exists,
// or appears twice in the call, fails the call with an error matching
// leasework.ErrDuplicateEvent; an existing id fails the statement, which
// aborts tx (PostgreSQL refuses every later statement of tx), so roll it back,
// or use [EnqueueWith] with SkipDuplicates. After any error from the database,
// roll tx back. A nil store or tx is an error.
func Enqueue(ctx context.Context, store *lease.Store, tx pgxv5.Tx, events ...lease.Event) ([]lease.Enqueued, error) {
	return EnqueueWith(ctx, store, tx, lease.EnqueueOptions{}, events...)
}

// EnqueueWith is [Enqueue] with options: store.EnqueueWith for a pgx.Tx.
// With opts.SkipDuplicates an event whose id exists is reported Duplicate
// and tx stays usable.
func EnqueueWith(ctx context.Context, store *lease.Store, tx pgxv5.Tx, opts lease.EnqueueOptions, events ...lease.Event) ([]lease.Enqueued, error) {
	if store == nil {
		return nil, errors.New("pgx: enqueue: store is nil")
	}
	if tx == nil {
		return nil, errors.New("pgx: enqueue: tx is nil; events are written in the caller's transaction")
	}
	return store.EnqueueTx(ctx, pgxTx{tx}, opts, events...)
}

// pgxTx is a pgx.Tx as a lease.Tx. pgx binds the enqueue's slices as arrays
// natively, so they are passed as they are.
type pgxTx struct{ tx pgxv5.Tx }

func (t pgxTx) Query(ctx context.Context, query string, args ...any) (lease.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (pgxTx) SQLState(err error) string { return Driver{}.SQLState(err) }
