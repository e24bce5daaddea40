package pq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/netdial"
	"github.com/lib/pq"
)

// Listen opens a pq.Listener on channel, with the DSN db was opened with,
// and waits at most 10s for its LISTEN to take effect; a failed connection
// attempt returns its error at once. On a pool not opened by [Driver.Open]
// it returns an error wrapping errors.ErrUnsupported: lib/pq does not tell
// the settings of its other pools, so the caller should poll instead of
// trying again.
func (Driver) Listen(ctx context.Context, db *sql.DB, channel string) (leasework.Listener, error) {
	dd, ok := db.Driver().(dsnDriver)
	if !ok {
		return nil, fmt.Errorf("pq: listen: cannot listen on a pool not opened by this package's Driver.Open: its DSN is unknown: %w", errors.ErrUnsupported)
	}
	l := &listener{d: newListenDialer(), lost: make(chan error, 1), failed: make(chan error, 1)}
	// Reconnections are the caller's business: a lost connection ends Wait.
	l.pl = pq.NewDialListener(l.d, dd.dsn, 100*time.Millisecond, 100*time.Millisecond, l.event)

	ctx, cancel := context.WithTimeout(ctx, listenTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.pl.Listen(channel) }()
	select {
	case err := <-done:
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("pq: listen: %w", unprefixed(err))
		}
		return l, nil
	case err := <-l.failed: // the caller retries as it sees fit
		l.Close() // ends the Listen call
		awaitListen(done)
		return nil, fmt.Errorf("pq: listen: %w", unprefixed(err))
	case <-ctx.Done():
		l.Close()
		awaitListen(done)
		return nil, fmt.Errorf("pq: listen: %w", ctx.Err())
	}
}

// awaitListen waits, at most closeTimeout, for the Listen call of a closed
// listener to return: closing its sockets ends it, but no wait is left
// unbounded on the word of a library.
func awaitListen(done <-chan error) {
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// listener is a pq.Listener that reports the loss of its connection instead
// of reconnecting, and pings a connection that has gone silent.
type listener struct {
	pl     *pq.Listener
	d      *listenDialer
	lost   chan error // capacity 1: the connection was lost
	failed chan error // capacity 1: a connection attempt failed

	closeOnce sync.Once
	closeErr  error
}

func (l *listener) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventDisconnected:
		select {
		case l.lost <- err:
		default:
		}
	case pq.ListenerEventConnectionAttemptFailed:
		select {
		case l.failed <- err:
		default:
		}
	}
}

// Wait returns the payload of the next notification. It returns an error
// when the connection is lost, or when after 5s without a notification a
// ping gets no answer within 5s.
func (l *listener) Wait(ctx context.Context) (string, error) {
	quiet := time.NewTimer(pingAfter)
	defer quiet.Stop()
	for {
		select {
		case n, ok := <-l.pl.Notify:
			switch {
			case !ok:
				return "", errors.New("pq: listen: the listener is closed")
			case n == nil: // reconnected: notifications may have been missed
				return "", nil
			}
			return n.Extra, nil
		case err := <-l.lost:
			return "", fmt.Errorf("pq: listen: connection lost: %w", unprefixed(err))
		case <-ctx.Done():
			return "", ctx.Err()
		case <-quiet.C:
			if err := l.ping(ctx); err != nil {
				return "", err
			}
			quiet.Reset(pingAfter)
		}
	}
}

// ping pings the server; when no answer comes in time it closes the
// listener's sockets, which ends the ping.
func (l *listener) ping(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- l.pl.Ping() }()
	t := time.NewTimer(pingTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("pq: listen: ping: %w", unprefixed(err))
		}
		return nil
	case <-t.C:
		l.d.close()
		return fmt.Errorf("pq: listen: no answer to a ping within %v", pingTimeout)
	case <-ctx.Done():
		return ctx.Err() // Close ends the ping
	}
}

// Close closes the listener's sockets first, which ends whatever lib/pq was
// waiting for on them, then the listener, and waits at most 5s for its
// goroutines to end. Calling it again returns the first call's result.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.d.close()
		go l.pl.Close()
		t := time.NewTimer(closeTimeout)
		defer t.Stop()
		for {
			select {
			case _, ok := <-l.pl.Notify: // the listener stops once it can deliver
				if !ok {
					return
				}
			case <-t.C:
				l.closeErr = fmt.Errorf("pq: listen: the listener did not stop within %v", closeTimeout)
				return
			}
		}
	})
	return l.closeErr
}

// listenDialer dials a listener's sockets and can close them all at once,
// and refuse to dial more.
type listenDialer struct {
	ctx    context.Context // ends when closed
	cancel context.CancelFunc

	mu      sync.Mutex
	sockets []net.Conn
	closed  bool
}

func newListenDialer() *listenDialer {
	d := &listenDialer{}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

func (d *listenDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d *listenDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d *listenDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()
	nc, err := netdial.Dialer().DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		nc.Close()
		return nil, net.ErrClosed
	}
	d.sockets = append(d.sockets, nc)
	return nc, nil
}

func (d *listenDialer) close() {
	d.cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, nc := range d.sockets {
		nc.Close()
	}
}
