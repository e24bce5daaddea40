// Package pgx binds leasework to PostgreSQL through
// github.com/jackc/pgx/v5/stdlib.
//
// pgx encodes Go slices as array parameters natively, and waits for
// LISTEN/NOTIFY wakeups on a dedicated pool connection, so [Driver] supports
// [leasework.Notifier].
package pgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/leasework/leasework"
)

// Driver is the pgx binding. Its zero value is ready to use.
type Driver struct{}

var (
	_ leasework.Driver   = Driver{}
	_ leasework.Notifier = Driver{}
)

// New returns the pgx driver.
func New() Driver { return Driver{} }

// Name returns "pgx".
func (Driver) Name() string { return "pgx" }

// Open opens a pool for dsn, a URL or key=value connection string.
func (Driver) Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, errors.New("pgx: Open: dsn is empty")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("pgx: open: %w", err)
	}
	return db, nil
}

// Array returns slice as is: pgx encodes slices as arrays itself.
func (Driver) Array(slice any) any { return slice }

// SQLState returns the SQLSTATE of a server error, or "".
func (Driver) SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsConnectionError reports whether err means the connection failed or was
// lost: pgconn's connect errors, and errors on a connection pgx has closed.
func (Driver) IsConnectionError(err error) bool {
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// Listen takes one connection out of db's pool for as long as the listener
// lives, and listens on channel with it.
func (Driver) Listen(ctx context.Context, db *sql.DB, channel string) (leasework.Listener, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgx: listen: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "LISTEN "+pgxv5.Identifier{channel}.Sanitize()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("pgx: listen: %w", err)
	}
	return &listener{conn: conn}, nil
}

type listener struct {
	conn *sql.Conn
}

func (l *listener) Wait(ctx context.Context) (string, error) {
	var payload string
	err := l.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgx: listen: connection is %T, not a pgx stdlib connection", dc)
		}
		n, err := c.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		payload = n.Payload
		return nil
	})
	return payload, err
}

func (l *listener) Close() error {
	// UNLISTEN before the connection goes back to the pool; a broken
	// connection is discarded by database/sql instead.
	_, _ = l.conn.ExecContext(context.Background(), "UNLISTEN *")
	return l.conn.Close()
}
