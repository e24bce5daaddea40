package netdial

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// lateMaxAge is how long a connection set up for a caller that stopped
// waiting is kept for the next one; an older one is closed, not handed out.
const lateMaxAge = 30 * time.Second

// KeepLate returns c with the work of a connection set-up kept when its
// caller stops waiting for it. database/sql sets a connection up on the
// goroutine of the statement that needs it, bounded by that statement's
// context; when a set-up takes longer than the statements may (a loaded
// machine, a server starting again), every try is abandoned half done and
// a pool that lost its connections never gets one back. Through KeepLate
// a set-up goes on past its caller's context, bounded by the connector's
// own connect timeout, and its connection goes to the next caller (kept,
// with no goroutine, until one comes or the pool is closed); a caller
// finds a set-up already under way before it starts one of its own. A
// caller that stops waiting gets its context's error at once, as before.
func KeepLate(c driver.Connector) driver.Connector {
	return &lateConnector{Connector: c}
}

type lateConnector struct {
	driver.Connector

	mu       sync.Mutex
	spares   []setUp      // connections set up that no caller took yet, oldest first
	waiters  []chan setUp // callers waiting for a set-up, first come first
	inflight int          // set-ups under way
	closed   bool         // by Close: set-ups that finish are closed
}

// setUp is the result of one set-up.
type setUp struct {
	conn driver.Conn
	err  error
	at   time.Time
}

func (l *lateConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var stale []driver.Conn // spares too old to hand out, closed once l.mu is released
	defer func() { closeAll(stale) }()
	l.mu.Lock()
	for len(l.spares) > 0 {
		s := l.spares[0]
		l.spares = l.spares[1:]
		if time.Since(s.at) < lateMaxAge {
			l.mu.Unlock()
			return s.conn, nil
		}
		stale = append(stale, s.conn)
	}
	ch := make(chan setUp, 1)
	l.waiters = append(l.waiters, ch)
	if l.inflight < len(l.waiters) {
		l.inflight++
		go l.setUp(ctx)
	}
	l.mu.Unlock()
	closeAll(stale)
	stale = nil
	select {
	case r := <-ch:
		return r.conn, r.err
	case <-ctx.Done():
	}
	l.mu.Lock()
	if i := slices.Index(l.waiters, ch); i >= 0 {
		l.waiters = slices.Delete(l.waiters, i, i+1)
	} else if c := l.handOver(<-ch); c != nil {
		// A set-up was handed to this caller as it gave up: passed on, or
		// closed with the pool.
		stale = append(stale, c)
	}
	l.mu.Unlock()
	return nil, fmt.Errorf("connect: %w (the set-up goes on, for the next caller)", context.Cause(ctx))
}

// closeAll closes conns: never under l.mu, as closing may wait on the
// network.
func closeAll(conns []driver.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// setUp sets a connection up, bounded by the connector's own timeout and
// not by ctx, and hands it over.
func (l *lateConnector) setUp(ctx context.Context) {
	conn, err := l.Connector.Connect(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.inflight--
	c := l.handOver(setUp{conn, err, time.Now()})
	l.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// handOver gives r to the first waiting caller; with none, keeps its
// connection for the next one (a failure goes to nobody). After Close it
// returns the connection for the caller to close once it has released
// l.mu, which is held.
func (l *lateConnector) handOver(r setUp) driver.Conn {
	switch {
	case len(l.waiters) > 0:
		ch := l.waiters[0]
		l.waiters = l.waiters[1:]
		ch <- r // buffered, and this waiter's only one
	case r.err != nil:
	case l.closed:
		return r.conn
	default:
		l.spares = append(l.spares, r)
	}
	return nil
}

// Close closes the connections kept for the next callers, makes set-ups
// still under way close theirs, and closes the connector it wraps when
// that is an io.Closer; (*sql.DB).Close calls it.
func (l *lateConnector) Close() error {
	l.mu.Lock()
	l.closed = true
	spares := l.spares
	l.spares = nil
	l.mu.Unlock()
	for _, s := range spares {
		_ = s.conn.Close()
	}
	if c, ok := l.Connector.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
