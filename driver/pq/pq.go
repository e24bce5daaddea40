// Package pq binds leasework to PostgreSQL through github.com/lib/pq.
//
// lib/pq binds slices as arrays through pq.Array, and waits for
// LISTEN/NOTIFY wakeups with a pq.Listener on a connection of its own. That
// connection needs the DSN, which a pool opened with [Driver.Open] carries;
// for any other pool [Driver.Listen] returns an error and workers fall back
// to polling.
package pq

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/leasework/leasework"
	"github.com/lib/pq"
)

// Driver is the lib/pq binding. Its zero value is ready to use.
type Driver struct{}

var (
	_ leasework.Driver   = (*Driver)(nil)
	_ leasework.Notifier = (*Driver)(nil)
)

// New returns a lib/pq driver.
func New() *Driver { return &Driver{} }

// Name returns "pq".
func (*Driver) Name() string { return "pq" }

// Open opens a pool for dsn, a URL or key=value connection string.
func (*Driver) Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, errors.New("pq: Open: dsn is empty")
	}
	conn, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("pq: open: %w", err)
	}
	return sql.OpenDB(connector{Connector: conn, dsn: dsn}), nil
}

// connector is lib/pq's, remembering the DSN for [Driver.Listen], which
// finds it through (*sql.DB).Driver.
type connector struct {
	*pq.Connector
	dsn string
}

func (c connector) Driver() driver.Driver { return dsnDriver{Driver: c.Connector.Driver(), dsn: c.dsn} }

type dsnDriver struct {
	driver.Driver
	dsn string
}

// Array wraps slice with pq.Array.
func (*Driver) Array(slice any) any { return pq.Array(slice) }

// SQLState returns the SQLSTATE of a server error, or "".
func (*Driver) SQLState(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}

// IsConnectionError reports whether err means the connection failed or was
// lost: lib/pq reports a dead connection as driver.ErrBadConn, or as a
// network error when the server goes away mid-statement.
func (*Driver) IsConnectionError(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code.Class() == "08" || pqErr.Fatal()
	}
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// Listen opens a pq.Listener on channel, with the DSN db was opened with.
func (*Driver) Listen(ctx context.Context, db *sql.DB, channel string) (leasework.Listener, error) {
	dd, ok := db.Driver().(dsnDriver)
	if !ok {
		return nil, errors.New("pq: listen: the pool was not opened with this package's Driver.Open; its DSN is unknown")
	}
	l := pq.NewListener(dd.dsn, 100*time.Millisecond, 10*time.Second, nil)
	done := make(chan error, 1)
	go func() { done <- l.Listen(channel) }()
	select {
	case err := <-done:
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("pq: listen: %w", err)
		}
	case <-ctx.Done():
		l.Close()
		return nil, fmt.Errorf("pq: listen: %w", ctx.Err())
	}
	return &listener{l: l}, nil
}

type listener struct {
	l *pq.Listener
}

// Wait returns on a notification, on a reconnection (payload "": events may
// have been missed while disconnected), or when ctx ends.
func (l *listener) Wait(ctx context.Context) (string, error) {
	select {
	case n, ok := <-l.l.NotificationChannel():
		if !ok {
			return "", errors.New("pq: listener closed")
		}
		if n == nil {
			return "", nil
		}
		return n.Extra, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (l *listener) Close() error { return l.l.Close() }
