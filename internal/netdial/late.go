package netdial

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
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
// own connect timeout, and its connection goes to the next caller; a
// caller finds a set-up already under way before it starts one of its
// own. A caller that stops waiting gets its context's error at once, as
// before.
func KeepLate(c driver.Connector) driver.Connector {
	return &lateConnector{Connector: c, results: make(chan setUp), done: make(chan struct{})}
}

type lateConnector struct {
	driver.Connector
	results   chan setUp
	done      chan struct{} // closed by Close
	closeOnce sync.Once

	mu       sync.Mutex
	inflight int // set-ups started whose result nobody has taken
	waiting  int // callers waiting for a result
}

// setUp is the result of one set-up.
type setUp struct {
	conn driver.Conn
	err  error
	at   time.Time
}

func (l *lateConnector) Connect(ctx context.Context) (driver.Conn, error) {
	began := time.Now()
	for {
		l.mu.Lock()
		if l.inflight <= l.waiting {
			l.inflight++
			go l.setUp(ctx)
		}
		l.waiting++
		l.mu.Unlock()
		select {
		case r := <-l.results:
			l.mu.Lock()
			l.waiting--
			l.inflight--
			l.mu.Unlock()
			switch {
			case r.err == nil && time.Since(r.at) > lateMaxAge:
				_ = r.conn.Close()
				continue
			case r.err != nil && r.at.Before(began):
				continue // an earlier caller's failure: try again
			}
			return r.conn, r.err
		case <-ctx.Done():
			l.mu.Lock()
			l.waiting--
			l.mu.Unlock()
			return nil, fmt.Errorf("connect: %w (the set-up goes on, for the next caller)", context.Cause(ctx))
		}
	}
}

// setUp sets a connection up, bounded by the connector's own timeout and
// not by ctx, and hands it to whichever caller waits first.
func (l *lateConnector) setUp(ctx context.Context) {
	conn, err := l.Connector.Connect(context.WithoutCancel(ctx))
	select {
	case l.results <- setUp{conn, err, time.Now()}:
	case <-l.done:
		if err == nil {
			_ = conn.Close()
		}
	}
}

// Close makes the set-ups nobody waits for close their connections, and
// closes the connector it wraps when that is an io.Closer; (*sql.DB).Close
// calls it.
func (l *lateConnector) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	if c, ok := l.Connector.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
