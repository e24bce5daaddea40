// Package pq binds leasework to PostgreSQL through github.com/lib/pq.
//
// lib/pq binds slices as arrays through pq.Array, and waits for
// LISTEN/NOTIFY wakeups with a pq.Listener on a connection of its own. That
// connection needs the DSN, so [Driver.Listen] works for pools opened with
// [Driver.Open]; for any other pool it returns an error and workers fall back
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
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/lib/pq"
)

// Driver is the lib/pq binding. Use [New]; a Driver must not be copied after
// first use.
type Driver struct {
	mu   sync.Mutex
	dsns map[*sql.DB]string
}

var (
	_ leasework.Driver   = (*Driver)(nil)
	_ leasework.Notifier = (*Driver)(nil)
)

// New returns a lib/pq driver.
func New() *Driver { return &Driver{} }

// Name returns "pq".
func (*Driver) Name() string { return "pq" }

// Open opens a pool for dsn, a URL or key=value connection string.
func (d *Driver) Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, errors.New("pq: Open: dsn is empty")
	}
	conn, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("pq: open: %w", err)
	}
	db := sql.OpenDB(conn)
	d.mu.Lock()
	if d.dsns == nil {
		d.dsns = map[*sql.DB]string{}
	}
	d.dsns[db] = dsn
	d.mu.Unlock()
	return db, nil
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
func (d *Driver) Listen(ctx context.Context, db *sql.DB, channel string) (leasework.Listener, error) {
	d.mu.Lock()
	dsn, ok := d.dsns[db]
	d.mu.Unlock()
	if !ok {
		return nil, errors.New("pq: listen: this pool was not opened with this driver's Open; its DSN is unknown")
	}
	l := pq.NewListener(dsn, 100*time.Millisecond, 10*time.Second, nil)
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
