// Package pgx binds leasework to PostgreSQL through
// github.com/jackc/pgx/v5/stdlib.
//
// pgx encodes Go slices as array parameters natively. [Driver] supports
// [leasework.Notifier]: it waits for LISTEN/NOTIFY wakeups with
// WaitForNotification on a connection of its own, outside the pool, so a
// listener never takes a pooled connection (a pool of one connection works),
// on any pool of pgx's database/sql driver, stdlib.OpenDBFromPool's
// included.
//
// # Services that use pgx natively
//
// [Enqueue] writes events in the application's own pgx.Tx (from a
// pgxpool.Pool or a pgx.Conn), with the checks, duplicate handling and
// notification of lease.Store.Enqueue; a batch of
// lease.Options.EnqueueCopyMin events or more goes in with pgx's CopyFrom
// ([WrapTx]'s transaction is a leasework.CopyTx). A *sql.Tx of this
// driver cannot COPY (database/sql keeps pgx's connection to itself), so
// the store sends its batches as one INSERT: enqueue large batches in a
// pgx.Tx. A worker can share the application's
// pgxpool: give framework.New the pool stdlib.OpenDBFromPool(pool) returns,
// and this driver; it listens for wakeups on a connection of its own made
// with the pool's connection settings, so it takes no pooled connection.
//
// # Dead connections
//
// A server that stops answering, its packets dropped and its socket left
// open, is noticed by bounds rather than waited for:
//
//   - A statement, a transaction or a query whose rows are being read
//     returns as soon as its context ends, and its connection is discarded:
//     pgx sets a deadline on the socket then. When the context's deadline
//     passed, [leasework.Classify] calls the error a lost connection.
//   - A pool opened by [Driver.Open] dials TCP connections with keepalives
//     (a first probe after 15s of silence, then one every 5s, the
//     connection dropped after 3 unanswered) and, on Linux, a
//     TCP_USER_TIMEOUT of 30s (data left unacknowledged that long drops
//     the connection, idle or not). A dead peer is so found within about
//     30s even on a connection no context bounds. A pool opened otherwise
//     keeps its own dial settings.
//   - Setting up a connection (dial, TLS, startup, authentication) of a
//     pool opened by [Driver.Open] takes at most the DSN's connect_timeout,
//     30s when it gives none: a server that accepts the connection and
//     then says nothing holds no one forever. The caller waits for it only
//     as long as its context lets it; the set-up goes on after that, and
//     the connection it opens goes to the next caller, so a set-up slower
//     than the statements that need one (a loaded machine, a server
//     starting again) still brings the pool its connections.
//   - A listener pings its connection after 5s without a notification; a
//     ping not answered within 5s ends [leasework.Listener.Wait] with an
//     error, so a dead listener is noticed within about 10s and the caller
//     listens again. Closing a listener takes at most 5s.
package pgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/netdial"
)

// The bounds described in the package documentation.
const (
	pingAfter     = 5 * time.Second  // of silence on a listener
	pingTimeout   = 5 * time.Second  // for its answer
	listenTimeout = 10 * time.Second // to connect a listener and LISTEN
	closeTimeout  = 5 * time.Second  // to close a listener's connection
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

// Open opens a pool for dsn, a URL or key=value connection string, whose
// connections are dialled with TCP keepalives and a user timeout (see the
// package documentation). It fails when dsn does not parse, not when the
// server is unreachable.
func (Driver) Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, errors.New("pgx: Open: dsn is empty")
	}
	cfg, err := pgxv5.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgx: open: %w", err)
	}
	cfg.DialFunc = netdial.Dialer().DialContext
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = netdial.ConnectTimeout
	}
	return sql.OpenDB(netdial.KeepLate(stdlib.GetConnector(*cfg))), nil
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
// lost: pgconn's connect errors, an error the server sent as it ended the
// session (severity FATAL or PANIC, such as 57P01 when its backend is
// terminated, or a connection exception, class 08), and errors on a
// connection pgx has closed.
func (Driver) IsConnectionError(err error) bool {
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" || strings.HasPrefix(pgErr.Code, "08")
	}
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// Listen connects to the database behind db on a connection of its own,
// outside db's pool, and listens on channel with it. It takes the
// connection settings from one of db's connections, held only for that, so
// it works on any pool of pgx's database/sql driver (sql.Open("pgx", …),
// stdlib.OpenDB, [Driver.Open]); on a pool of another driver it returns an
// error wrapping errors.ErrUnsupported. Connecting and LISTEN take at most
// 10s.
func (Driver) Listen(ctx context.Context, db *sql.DB, channel string) (leasework.Listener, error) {
	ctx, cancel := context.WithTimeout(ctx, listenTimeout)
	defer cancel()
	cfg, err := connConfig(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("pgx: listen: %w", err)
	}
	conn, err := pgxv5.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgx: listen: %w", err)
	}
	l := &listener{conn: conn}
	if _, err := conn.Exec(ctx, "LISTEN "+pgxv5.Identifier{channel}.Sanitize()); err != nil {
		l.Close()
		return nil, fmt.Errorf("pgx: listen: %w", err)
	}
	return l, nil
}

// connConfig returns the settings of db's connections.
func connConfig(ctx context.Context, db *sql.DB) (*pgxv5.ConnConfig, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgxv5.ConnConfig
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("the pool's connections are %T, not pgx's: %w", dc, errors.ErrUnsupported)
		}
		cfg = c.Conn().Config()
		// The copy delivers notifications to the pooled connection; unset,
		// pgx delivers them to the connection it makes.
		cfg.OnNotification = nil
		return nil
	})
	return cfg, err
}

// listener owns its connection; closing the connection ends its LISTEN.
type listener struct {
	conn *pgxv5.Conn
}

// Wait returns the payload of the next notification. After 5s without one
// it pings the connection, and returns an error if no answer comes within
// 5s.
func (l *listener) Wait(ctx context.Context) (string, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, pingAfter)
		n, err := l.conn.WaitForNotification(wctx)
		silent := wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return n.Payload, nil
		case ctx.Err() != nil:
			return "", ctx.Err()
		case !silent:
			return "", fmt.Errorf("pgx: listen: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = l.conn.Ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil:
			return "", fmt.Errorf("pgx: listen: no answer to a ping within %v: %w", pingTimeout, err)
		}
	}
}

// Close closes the connection, which ends its LISTEN, within 5s.
func (l *listener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return l.conn.Close(ctx)
}
