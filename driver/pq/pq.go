// Package pq binds leasework to PostgreSQL through github.com/lib/pq.
//
// lib/pq binds slices as arrays through pq.Array, and waits for
// LISTEN/NOTIFY wakeups with a pq.Listener on a connection of its own. That
// connection needs the DSN, which a pool opened with [Driver.Open] carries;
// lib/pq keeps the settings of any other pool to itself, so on such a pool
// [Driver.Listen] returns an error wrapping errors.ErrUnsupported, every
// time, and workers poll instead.
//
// [Driver] is a [leasework.Copier]: the lease store enqueues a batch of
// lease.Options.EnqueueCopyMin events or more, in a *sql.Tx of a pool of
// this driver, with lib/pq's COPY (text format) prepared on the
// transaction, on any pool of lib/pq's driver.
//
// # Dead connections
//
// A server that stops answering, its packets dropped and its socket left
// open, is noticed by bounds rather than waited for. The first three hold
// for pools opened by [Driver.Open]:
//
//   - When the context of a statement, a transaction or a query whose rows
//     are being read ends, lib/pq sends the server a cancel request; 1s
//     later the connection's socket gets a deadline, so that the call
//     returns even when the server never answers, with an error that
//     [leasework.Classify] calls a lost connection, and the connection is
//     discarded. A cancel request itself is given up after 10s. A COPY
//     ([Driver.CopyFrom]) gets no cancel request (lib/pq sends none for
//     it), only the deadline.
//   - Setting up a connection (dial, TLS, startup, authentication) takes
//     at most the DSN's connect_timeout, 30s when it gives none: a server
//     that accepts the connection and then says nothing holds no one
//     forever. (lib/pq itself bounds only the dial.) The caller waits for
//     it only as long as its context lets it; the set-up goes on after
//     that, and the connection it opens goes to the next caller, so a
//     set-up slower than the statements that need one (a loaded machine,
//     a server starting again) still brings the pool its connections.
//   - Connections are dialled with TCP keepalives (a first probe after 15s
//     of silence, then one every 5s, the connection dropped after 3
//     unanswered) and, on Linux, a TCP_USER_TIMEOUT of 30s (data left
//     unacknowledged that long drops the connection, idle or not). A dead
//     peer is so found within about 30s even on a connection no context
//     bounds.
//   - A listener pings its connection after 5s without a notification; a
//     ping not answered within 5s ends [leasework.Listener.Wait] with an
//     error, as does any loss of its connection, so a dead listener is
//     noticed within about 10s and the caller listens again. LISTEN is
//     given 10s, and closing a listener takes at most 5s.
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
	"github.com/leasework/leasework/internal/errprefix"
	"github.com/leasework/leasework/internal/netdial"
	"github.com/lib/pq"
)

// The bounds described in the package documentation.
const (
	cancelGrace   = time.Second      // for the server to answer a cancel request
	cancelTimeout = 10 * time.Second // for a cancel request to be sent and acknowledged

	pingAfter     = 5 * time.Second  // of silence on a listener
	pingTimeout   = 5 * time.Second  // for its answer
	listenTimeout = 10 * time.Second // to connect a listener and LISTEN
	closeTimeout  = 5 * time.Second  // to close a listener
)

// Driver is the lib/pq binding. Its zero value is ready to use.
type Driver struct{}

var (
	_ leasework.Driver   = Driver{}
	_ leasework.Notifier = Driver{}
)

// New returns the lib/pq driver.
func New() Driver { return Driver{} }

// Name returns "pq".
func (Driver) Name() string { return "pq" }

// Open opens a pool for dsn, a URL or key=value connection string, whose
// connections are bounded as the package documentation says. It fails when
// dsn does not parse, not when the server is unreachable.
func (Driver) Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, errors.New("pq: Open: dsn is empty")
	}
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pq: open: %w", unprefixed(err))
	}
	return sql.OpenDB(netdial.KeepLate(&connector{cfg: cfg, dsn: dsn})), nil
}

// connector opens lib/pq connections that put a deadline on their socket
// when an operation's context ends (see conn). It remembers the DSN for
// [Driver.Listen], which finds it through (*sql.DB).Driver.
type connector struct {
	cfg pq.Config
	dsn string
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	// A lib/pq connector of its own, so that its dialer sees the socket of
	// this connection only.
	pc, err := pq.NewConnectorConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	d := &connDialer{}
	pc.Dialer(d)
	// lib/pq bounds the dial by ctx, and the dial and startup by
	// connect_timeout when the DSN gives one; but not the startup by ctx,
	// nor the target_session_attrs check that follows by either. A server
	// that accepted the connection and then says nothing would hold the
	// caller past its context (forever, without connect_timeout: the pool
	// opens connections in the background with no deadline). When ctx
	// ends or the bound (connect_timeout, or 30 s) passes, the socket gets
	// a deadline.
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout())
	defer cancel()
	expire := context.AfterFunc(ctx, d.expire)
	dc, err := pc.Connect(ctx)
	if !expire() {
		// The deadline came first: the socket, if any, has passed it.
		if err == nil {
			dc.Close()
			return nil, fmt.Errorf("pq: connect: %w", ctx.Err())
		}
		return nil, fmt.Errorf("pq: connect: %w: %w", ctx.Err(), unprefixed(err))
	}
	if err != nil {
		return nil, err
	}
	return wrapConn(dc, d.connected())
}

// unprefixed leaves "pq: " out of the start of err's message: lib/pq's
// messages start with it, as this package's do, and wrapped in one of ours
// it would read twice ("pq: listen: pq: password authentication failed").
// errors.As still finds a *pq.Error.
func unprefixed(err error) error { return errprefix.Trim("pq: ", err) }

// connectTimeout bounds a connection's set-up: the DSN's connect_timeout,
// or netdial.ConnectTimeout.
func (c *connector) connectTimeout() time.Duration {
	if c.cfg.ConnectTimeout > 0 {
		return c.cfg.ConnectTimeout
	}
	return netdial.ConnectTimeout
}

func (c *connector) Driver() driver.Driver { return dsnDriver{Driver: &pq.Driver{}, dsn: c.dsn} }

type dsnDriver struct {
	driver.Driver
	dsn string
}

// connDialer dials the socket of one connection, and then lib/pq's cancel
// requests for it.
type connDialer struct {
	mu      sync.Mutex
	socket  net.Conn // the last dialled while connecting
	done    bool     // connected: later dials are cancel requests
	expired bool     // the set-up's time ran out: sockets fail at once
}

// expire ends the set-up of the connection: its socket, and any dialled
// later, get a deadline in the past.
func (d *connDialer) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expired = true
	if d.socket != nil && !d.done {
		d.socket.SetDeadline(time.Now())
	}
}

func (d *connDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d *connDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d *connDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nc, err := netdial.Dialer().DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		// lib/pq reads a cancel request's socket until the server closes
		// it; a server that never does must not hold it forever.
		nc.SetDeadline(time.Now().Add(cancelTimeout))
	} else {
		d.socket = nc
		if d.expired {
			nc.SetDeadline(time.Now())
		}
	}
	return nc, nil
}

// connected returns the connection's socket, and makes later dials cancel
// requests.
func (d *connDialer) connected() net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = true
	return d.socket
}

// Array wraps slice with pq.Array.
func (Driver) Array(slice any) any { return pq.Array(slice) }

// SQLState returns the SQLSTATE of a server error, or "".
func (Driver) SQLState(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}

// IsConnectionError reports whether err means the connection failed or was
// lost: lib/pq reports a dead connection as driver.ErrBadConn, or as a
// network error when the server goes away mid-statement.
func (Driver) IsConnectionError(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code.Class() == "08" || pqErr.Fatal()
	}
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}
