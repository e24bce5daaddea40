package pgx

import (
	"context"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/leasework/leasework"
)

// WrapTx adapts tx, a transaction the application opened with pgx itself
// (pgx.Conn.Begin, pgxpool.Pool.Begin), to leasework.Tx, so that the lease
// store enqueues in it (lease.Store.EnqueueTx) and the events commit with
// its business writes or not at all: the transactional outbox for services
// that use pgx natively. The store may use either driver: its table, its
// default attempt budget and its statements are used; its pool is not.
// The events become visible to workers when tx commits, and the table's
// trigger wakes listening workers then; they vanish if tx rolls back. pgx
// binds the store's slices as arrays natively, so they are passed as they
// are. Large batches go in with pgx's CopyFrom (the result is a
// leasework.CopyTx; see lease.Options.EnqueueCopyMin). WrapTx(nil) is nil,
// which EnqueueTx refuses.
func WrapTx(tx pgxv5.Tx) leasework.Tx {
	if tx == nil {
		return nil
	}
	return pgxTx{tx}
}

// pgxTx is a pgx.Tx as a leasework.CopyTx.
type pgxTx struct{ tx pgxv5.Tx }

var _ leasework.CopyTx = pgxTx{}

func (t pgxTx) Query(ctx context.Context, query string, args ...any) (leasework.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (pgxTx) SQLState(err error) string { return Driver{}.SQLState(err) }

// CopyFrom copies rows with pgx's CopyFrom (binary COPY; pgx quotes the
// names).
func (t pgxTx) CopyFrom(ctx context.Context, table, columns []string, rows [][]any) (int64, error) {
	return t.tx.CopyFrom(ctx, pgxv5.Identifier(table), columns, pgxv5.CopyFromRows(rows))
}
