package leasework

import (
	"context"
	"database/sql"
)

// Driver binds leasework to one database/sql driver for PostgreSQL. It is all
// a driver package must provide; the SQL itself is shared and lives in the
// lease package. Optional capabilities are separate interfaces, discovered by
// type assertion ([Notifier]).
//
// The driver packages driver/pgx and driver/pq implement it; an outsider can
// write one in an afternoon and prove it with the conformance suite.
type Driver interface {
	// Name is a short name for logs and test names, such as "pgx".
	Name() string

	// Open returns a connection pool for dsn. It should not fail merely
	// because the server is unreachable; the first query reports that.
	Open(dsn string) (*sql.DB, error)

	// Array wraps a slice so that it binds as a PostgreSQL array parameter.
	// The lease package passes []int64, []string and [][]byte.
	Array(slice any) any

	// SQLState returns the five-character SQLSTATE code carried by err, or ""
	// when err did not come from the server.
	SQLState(err error) string
}

// Notifier is the optional capability of a [Driver] to wait for LISTEN/NOTIFY
// wakeups. Workers whose driver lacks it (or returns an error from Listen)
// fall back to polling.
type Notifier interface {
	// Listen starts listening on channel with a dedicated connection to the
	// database behind db.
	Listen(ctx context.Context, db *sql.DB, channel string) (Listener, error)
}

// Listener receives notifications on one channel.
type Listener interface {
	// Wait blocks until a notification arrives, ctx ends, or the connection
	// fails. It returns the notification's payload.
	Wait(ctx context.Context) (payload string, err error)

	// Close releases the listener's connection.
	Close() error
}

// SQLSTATE codes that leasework branches on.
const (
	SQLStateUniqueViolation      = "23505"
	SQLStateSerializationFailure = "40001"
	SQLStateDeadlockDetected     = "40P01"
)
