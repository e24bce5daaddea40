package leasework

import "context"

// Tx is a transaction of any database library, as the lease store needs it
// to enqueue events in a transaction the application opened itself
// (lease.Store.EnqueueTx): enough to run a statement and read its rows. A
// driver package adapts its library's transaction to it (driver/pgx's
// WrapTx does so for a pgx.Tx); the lease store adapts a *sql.Tx itself.
type Tx interface {
	// Query runs a statement that returns rows, in the transaction. Its
	// arguments are bound parameters; the lease store's arrays are passed
	// as Go slices ([]string, []int64, [][]byte), which an implementation
	// binds as PostgreSQL arrays (pgx does so natively; lib/pq needs each
	// wrapped in pq.Array). An error may be returned here or by the rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)

	// SQLState returns the SQLSTATE code carried by an error of Query or of
	// its rows, or "" when the server did not send it: a unique violation
	// (23505) is reported as ErrDuplicateEvent.
	SQLState(err error) string
}

// Rows are the rows of [Tx.Query], read as database/sql's are: pgx.Rows
// satisfies it as it is.
type Rows interface {
	// Next advances to the next row; false at the end or on an error.
	Next() bool
	// Scan copies the current row's columns into dest.
	Scan(dest ...any) error
	// Err is the error that ended the rows, if any.
	Err() error
	// Close releases the rows; it may be called more than once.
	Close()
}

// CopyTx is the optional capability of a [Tx] to copy rows into a table
// with COPY … FROM STDIN, which the lease store's enqueue uses for large
// batches (lease.Options.EnqueueCopyMin): the rows go to the server as a
// stream instead of arrays bound to one INSERT, the same rows, triggers
// and constraints. A Tx without it gets the INSERT for every batch.
// driver/pgx's WrapTx implements it with pgx's CopyFrom.
type CopyTx interface {
	Tx

	// CopyFrom copies rows into columns of table, in the transaction, in
	// the order given, and returns how many rows the table took (fewer
	// than given when a trigger dropped some). table is the schema and
	// the table's name, unquoted; the implementation quotes each part,
	// and the column names. Each row holds one value per column: nil
	// (NULL), string (for text and jsonb columns), []byte (bytea), int64
	// (bigint, integer, smallint) or time.Time (timestamptz). Neither
	// slice is kept after the call. An error leaves the transaction
	// aborted, as a failed statement does; SQLState reads its code (a
	// unique violation, say).
	CopyFrom(ctx context.Context, table, columns []string, rows [][]any) (int64, error)
}
