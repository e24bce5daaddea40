package leasework

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
)

// Driver binds leasework to one database/sql driver for PostgreSQL. It is all
// a driver package must provide; the SQL itself is shared and lives in the
// lease package. Optional capabilities are separate interfaces, discovered by
// type assertion ([Notifier], [Copier]).
//
// A driver's hardest duty is bounding dead connections: a server that
// stops answering, its packets dropped and its socket left open (a failed
// router, a paused machine), holds no caller past the bounds of Open and
// [Listener], and the error says the connection was lost. TCP keepalives
// alone do not notice while something in between (a proxy) still
// acknowledges the packets.
//
// The driver packages driver/pgx and driver/pq implement it; an outsider can
// write one in an afternoon and prove it with the conformance suite, which
// checks each duty stated here, the dead connections through a proxy that
// blackholes them.
type Driver interface {
	// Name is a short name for logs and test names, such as "pgx": 1 to
	// 32 ASCII letters, digits, '.', '_' or '-'.
	Name() string

	// Open returns a connection pool for dsn, a URL or key=value
	// connection string. It should not fail merely because the server is
	// unreachable; the first query reports that. However dead the
	// server, the pool's calls end:
	//
	//   - a statement, a query whose rows are being read, and a
	//     statement in a transaction end soon after their context does,
	//     within a bound the driver documents, with an error that
	//     [Classify] calls [ClassConnection]; the transaction's end then
	//     gives its connection back to the pool (or discards it);
	//   - setting up a connection (dial, TLS, startup, authentication)
	//     ends when the context of the call that needs it ends, and when
	//     the DSN's connect_timeout passes, whatever the context.
	Open(dsn string) (*sql.DB, error)

	// Array wraps a slice so that it binds as a PostgreSQL array parameter.
	// The lease package passes []int64, []string and [][]byte.
	Array(slice any) any

	// SQLState returns the five-character SQLSTATE code carried by err, or ""
	// when err did not come from the server. The lease package branches on
	// it: a unique violation is [ErrDuplicateEvent], for one.
	SQLState(err error) string

	// IsConnectionError reports whether err means the connection failed or
	// was lost (refused, reset, closed by the server, or given up by the
	// driver on one of Open's bounds), as opposed to a statement the server
	// rejected. The statement may or may not have been applied. It must be
	// true for the driver's own errors of that kind, such as the error of
	// a statement on a connection whose backend the server terminated;
	// [Classify] recognizes driver.ErrBadConn, io.EOF and net.Error
	// without it. It must be false for an error the server sent about a
	// statement, such as a serialization failure.
	IsConnectionError(err error) bool
}

// Notifier is the optional capability of a [Driver] to wait for LISTEN/NOTIFY
// wakeups. Workers whose driver lacks it (or returns an error from Listen)
// fall back to polling.
type Notifier interface {
	// Listen starts listening on channel with a dedicated connection to the
	// database behind db. It returns an error wrapping errors.ErrUnsupported
	// when it can never listen on db (a pool whose connection settings the
	// driver cannot learn, say): callers should then poll and not call
	// Listen again for that pool. Any other error may be temporary.
	Listen(ctx context.Context, db *sql.DB, channel string) (Listener, error)
}

// Copier is the optional capability of a [Driver] to copy rows into a
// table with COPY … FROM STDIN in a database/sql transaction of its pools,
// as [CopyTx.CopyFrom] does (the same arguments and result): the lease
// store's enqueue in a *sql.Tx copies large batches with it. A driver
// whose transactions cannot COPY leaves it out, and every batch is
// inserted with one INSERT statement instead. driver/pq implements it
// with lib/pq's COPY; pgx through database/sql has no COPY, so driver/pgx
// does not (its WrapTx of a pgx.Tx does).
type Copier interface {
	CopyFrom(ctx context.Context, tx *sql.Tx, table, columns []string, rows [][]any) (int64, error)
}

// Listener receives notifications on one channel.
type Listener interface {
	// Wait blocks until a notification arrives, ctx ends, or the connection
	// fails. It returns the notification's payload. It must notice a
	// connection that went silent (by pinging it, say) and return an error
	// within a bound the driver documents, whatever ctx allows, so that
	// the caller listens again.
	Wait(ctx context.Context) (payload string, err error)

	// Close releases the listener's connection, within a bound the driver
	// documents, however dead the connection is.
	Close() error
}

// SQLSTATE codes that leasework branches on.
const (
	SQLStateUniqueViolation      = "23505"
	SQLStateSerializationFailure = "40001"
	SQLStateDeadlockDetected     = "40P01"
	SQLStateQueryCanceled        = "57014"
)

// ErrorClass is what kind of failure an error is, as far as retrying goes.
type ErrorClass int

// The classes [Classify] tells apart.
const (
	ClassNone          ErrorClass = iota // err is nil
	ClassOther                           // any other error: a bug, bad input, a constraint
	ClassUnique                          // a unique violation (SQLSTATE 23505)
	ClassSerialization                   // serialization failure or deadlock: retry the transaction
	ClassConnection                      // the connection failed or was lost: retry on another
	ClassCanceled                        // the server cancelled the statement (SQLSTATE 57014: a statement timeout, or a driver's cancel request when its context ended); it was not applied: retry
)

// String names the class, for logs.
func (c ErrorClass) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassUnique:
		return "unique violation"
	case ClassSerialization:
		return "serialization failure"
	case ClassConnection:
		return "connection lost"
	case ClassCanceled:
		return "statement cancelled"
	}
	return "other"
}

// Classify tells what kind of failure err is: by SQLSTATE for errors the
// server sent, and by drv.IsConnectionError and the standard library's
// connection errors otherwise.
func Classify(drv Driver, err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	switch code := drv.SQLState(err); {
	case code == SQLStateUniqueViolation:
		return ClassUnique
	case code == SQLStateSerializationFailure || code == SQLStateDeadlockDetected:
		return ClassSerialization
	case code == SQLStateQueryCanceled:
		return ClassCanceled
	case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03":
		// connection exception; admin shutdown, crash shutdown, cannot connect now
		return ClassConnection
	case code != "":
		return ClassOther
	}
	var netErr net.Error
	if drv.IsConnectionError(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) {
		return ClassConnection
	}
	return ClassOther
}
