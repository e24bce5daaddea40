package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
)

// The driver's own duty: every wait on the network is bounded, whatever
// the server does (leasework.Driver). Each property blackholes a connection
// through the suite's proxy, or dials a server that never answers, and
// waits at most deadConnBound for the driver to give up by itself.
func deadConnProperties() []property {
	return []property{
		{"DeadConnStatementEndsWithItsDeadline", deadConnStatement},
		{"DeadConnRowsEndWithTheirDeadline", deadConnRows},
		{"DeadConnTransactionEndsAndFreesItsConnection", deadConnTransaction},
		{"DeadConnListenerNoticesAndCloses", deadConnListener},
		{"DeadConnHandshakeEndsWithTheContext", deadConnHandshakeContext},
		{"DeadConnHandshakeEndsAtConnectTimeout", deadConnHandshakeConnectTimeout},
	}
}

// deadConnBound bounds how long a dead-connection property waits for a
// call to return by itself: far above any bound a driver should document,
// so that reaching it means the call would have waited forever. It is a
// variable only for this package's own tests, which shorten it for a
// driver they know waits forever.
var deadConnBound = 30 * time.Second

// The context deadline of a statement on a dead connection, at the first
// try, and how many tries a property makes when an attempt checked nothing
// (the deadline passed before the blackhole, say), each with twice the
// deadline: the last one's is 25.6s, room for a machine loaded far beyond
// its cores. The deadline is the fixture's, not what is checked: the call
// must end soon after it, whatever it is.
const (
	deadConnDeadline = 200 * time.Millisecond
	deadConnTries    = 8
)

// A statement on a connection that went silent (packets dropped, socket
// left open) while its context has a deadline returns with an error that
// leasework.Classify calls a lost connection, within the bound.
func deadConnStatement(e *env) {
	e.deadStatement(func(ctx context.Context, db *sql.DB, silence func()) error {
		silence()
		_, err := db.ExecContext(ctx, `SELECT 1`)
		return err
	})
}

// A query whose rows are being read when its connection goes silent ends
// (rows.Err) with an error that leasework.Classify calls a lost
// connection, within the bound, and so does closing the rows.
//
// The rows already in flight at the blackhole (megabytes, in the sockets'
// buffers) are still read. An attempt tests the driver's bound only if
// the driver then waited on the dead connection when the deadline came: a
// driver that looks at its context only between reads would otherwise
// pass by ending mid-buffer. So an attempt where a row still came in the
// last half of the time between the blackhole and the deadline (or in
// the last eighth of the deadline) checked nothing, and is made again
// with a longer deadline.
func deadConnRows(e *env) {
	e.deadStatement(func(ctx context.Context, db *sql.DB, silence func()) error {
		start := time.Now()
		// An endless stream whose estimated cost is tiny: a query the
		// planner thinks costly (generate_series of a billion rows) is
		// compiled by the server's JIT first, which takes a second on a
		// loaded machine and would leave the deadline no time.
		rows, err := db.QueryContext(ctx, `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s) SELECT n FROM s`)
		if err != nil {
			return fmt.Errorf("before the blackhole: %w", err)
		}
		defer rows.Close()
		if !rows.Next() {
			return fmt.Errorf("before the blackhole: no first row: %w", rows.Err())
		}
		silence()
		silenced := time.Now()
		last := silenced
		for rows.Next() {
			last = time.Now()
		}
		err = rows.Err()
		dl, _ := ctx.Deadline()
		if quiet := max(dl.Sub(silenced)/2, dl.Sub(start)/8); ctx.Err() != nil && dl.Sub(last) < quiet {
			return fmt.Errorf("%w: the last row came %v after the blackhole, the deadline %v after it", errRowsInFlight,
				last.Sub(silenced).Round(time.Millisecond), dl.Sub(silenced).Round(time.Millisecond))
		}
		if err != nil {
			return err
		}
		return errors.New("the rows of an endless query ended with no error")
	})
}

// errRowsInFlight ends an attempt of DeadConnRowsEndWithTheirDeadline
// that checked nothing: the rows in flight at the blackhole lasted until
// near the deadline.
var errRowsInFlight = errors.New("the rows in flight at the blackhole lasted until near the deadline")

// A statement in a transaction whose connection goes silent returns with
// an error that leasework.Classify calls a lost connection, within the
// bound, and the transaction's end gives the pool's only connection back
// (database/sql rolls back when the context ends): a ping on the pool
// succeeds.
func deadConnTransaction(e *env) {
	e.deadStatement(func(ctx context.Context, db *sql.DB, silence func()) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("before the blackhole: %w", err)
		}
		defer tx.Rollback()
		silence()
		_, err = tx.ExecContext(ctx, `SELECT 1`)
		if err == nil {
			return errors.New("a statement on a blackholed connection succeeded")
		}
		ping, cancel := context.WithTimeout(context.Background(), deadConnBound)
		defer cancel()
		if perr := db.PingContext(ping); perr != nil {
			return fmt.Errorf("the pool did not get its connection back: %w", perr)
		}
		return err
	})
}

// deadStatement runs one dead-statement check: run blackholes db's only
// connection with silence while its ctx, which has a deadline, is in
// force, and returns the error the call got. An attempt whose deadline
// passed before the blackhole (a loaded machine slow to return the first
// row) checks nothing: it is made again, on a fresh proxy and pool, with
// twice the deadline.
func (e *env) deadStatement(run func(ctx context.Context, db *sql.DB, silence func()) error) {
	e.t.Helper()
	srv := e.deadConnServer()
	d := deadConnDeadline
	for try := 1; ; try++ {
		why := e.deadStatementTry(srv, d, run)
		if why == "" {
			return
		}
		if try == deadConnTries {
			e.t.Fatalf("in %d tries, up to a deadline of %v, the deadline never left time to test the driver: %s", try, d, why)
		}
		e.t.Logf("%s with a deadline of %v; trying again with %v", why, d, 2*d)
		d *= 2
	}
}

// deadStatementTry makes one attempt with a context whose deadline is d
// from the start. It returns why it checked nothing, when the deadline
// passed before run blackholed the connection (or before the rows in
// flight ran out, errRowsInFlight), or "" once it checked.
func (e *env) deadStatementTry(srv *server, d time.Duration, run func(ctx context.Context, db *sql.DB, silence func()) error) string {
	e.t.Helper()
	p := newProxy(e.t, srv)
	db := e.openThrough(p)
	db.SetMaxOpenConns(1)
	e.pingThrough(db, srv)
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	silenced := make(chan bool, 1) // whether the deadline was still ahead
	silence := func() {
		silenced <- ctx.Err() == nil
		if n := p.Blackhole(); n != 1 {
			e.t.Errorf("blackholed %d connections, want 1", n)
		}
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, db, silence) }()
	select {
	case err := <-done:
		inTime := false
		select {
		case inTime = <-silenced:
		default:
		}
		switch {
		case !inTime && ctx.Err() != nil:
			return "the deadline passed before the blackhole"
		case errors.Is(err, errRowsInFlight):
			return err.Error()
		}
		dl, _ := ctx.Deadline()
		e.t.Logf("%s: returned %v after the deadline: %v", e.target.Driver.Name(), time.Since(dl).Round(time.Millisecond), err)
		if c := leasework.Classify(e.target.Driver, err); c != leasework.ClassConnection {
			e.t.Errorf("error %v (%T) is classified %q, want %q", err, err, c, leasework.ClassConnection)
		}
	case <-time.After(deadConnBound):
		e.t.Fatalf("still waiting for a blackholed connection %v after the deadline", deadConnBound)
	}
	return ""
}

// A listener (leasework.Notifier) whose connection goes silent notices by
// itself: Wait, whose context allows it more than the bound, returns an
// error within the bound, so that the caller listens again; and Close
// then returns within the bound.
func deadConnListener(e *env) {
	if _, ok := e.target.Driver.(leasework.Notifier); !ok {
		e.t.Skip("optional capability: the driver does not implement leasework.Notifier (workers poll)")
	}
	srv := e.deadConnServer()
	p := newProxy(e.t, srv)
	db := e.openThrough(p)
	e.pingThrough(db, srv)
	channel := e.fix.Channel()
	l := e.listenOn(db, channel)
	closed := false
	e.t.Cleanup(func() {
		if !closed { // the subtest ended early: the proxy's end lets Close end
			p.Close()
			l.Close()
		}
	})
	// Notifications go through the subtest's own pool, not the proxy.
	if _, err := e.db.ExecContext(e.ctx, `SELECT pg_notify($1, 'before')`, channel); err != nil {
		e.t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(e.ctx, deadConnBound)
	defer cancel()
	if payload, err := l.Wait(wait); err != nil || payload != "before" {
		e.t.Fatalf("Wait before the blackhole: %q, %v; want the notification", payload, err)
	}

	if p.Blackhole() == 0 {
		e.t.Fatal("blackholed no connection: the listener's connection does not reach the server through the pool's DSN")
	}
	start := time.Now()
	// A notification sent now never arrives.
	if _, err := e.db.ExecContext(e.ctx, `SELECT pg_notify($1, 'lost')`, channel); err != nil {
		e.t.Fatal(err)
	}
	wait, cancel = context.WithTimeout(context.Background(), deadConnBound)
	defer cancel()
	payload, err := l.Wait(wait)
	switch {
	case wait.Err() != nil:
		e.t.Errorf("Wait on a blackholed listener waited %v without noticing (%q, %v)", time.Since(start).Round(time.Millisecond), payload, err)
	case err == nil:
		e.t.Errorf("Wait on a blackholed listener returned %q, no error", payload)
	default:
		e.t.Logf("%s: the listener noticed after %v: %v", e.target.Driver.Name(), time.Since(start).Round(time.Millisecond), err)
	}

	start = time.Now()
	closed = true
	closeErr := make(chan error, 1)
	go func() { closeErr <- l.Close() }()
	select {
	case err := <-closeErr:
		e.t.Logf("%s: Close returned after %v: %v", e.target.Driver.Name(), time.Since(start).Round(time.Millisecond), err)
	case <-time.After(deadConnBound):
		e.t.Errorf("Close of a blackholed listener still waiting after %v", deadConnBound)
		p.Close() // let it end
		<-closeErr
	}
}

// The set-up of a connection to a server that accepts it and then says
// nothing (an overloaded or stopped server process, a blackhole past the
// accept) ends with an error when the context of the call that needs it
// ends, though the DSN's connect_timeout allows ten minutes: a ping whose
// context has a deadline returns within the bound. An attempt whose
// deadline passed before the server accepted the connection checked
// nothing (the ping may not even have begun one): it is made again with
// twice the deadline, as for statements.
func deadConnHandshakeContext(e *env) {
	srv := e.deadConnServer()
	d := deadConnDeadline
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		checked := e.deadHandshake(srv, ctx, "600")
		cancel()
		if checked {
			return
		}
		if try == deadConnTries {
			e.t.Fatalf("in %d tries, up to a deadline of %v, the deadline always passed before the server accepted the connection", try, d)
		}
		e.t.Logf("the deadline of %v passed before the server accepted the connection; trying again with %v", d, 2*d)
		d *= 2
	}
}

// The set-up of a connection to a server that accepts it and then says
// nothing ends with an error when the DSN's connect_timeout (1s) passes,
// though the context has no deadline: a ping returns within the bound.
func deadConnHandshakeConnectTimeout(e *env) {
	e.deadHandshake(e.deadConnServer(), context.Background(), "1")
}

// deadHandshake pings, with ctx, a pool for srv's DSN pointed at a silent
// server with connect_timeout set to connectTimeout seconds. It reports
// false, having checked nothing, when ctx's deadline passed before the
// silent server accepted a connection.
func (e *env) deadHandshake(srv *server, ctx context.Context, connectTimeout string) bool {
	e.t.Helper()
	silent := newSilentServer(e.t)
	db, err := e.target.open(srv.at(silent.addr(), "connect_timeout", connectTimeout))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- db.PingContext(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			e.t.Fatal("a ping of a server that never answers succeeded")
		}
		if dl, ok := ctx.Deadline(); ok {
			if at, ok := silent.firstAccept(); !ok || !at.Before(dl) {
				return false
			}
		}
		e.t.Logf("%s: the connection's set-up ended after %v: %v", e.target.Driver.Name(), time.Since(start).Round(time.Millisecond), err)
	case <-time.After(deadConnBound):
		e.t.Errorf("the set-up of a connection to a silent server still waiting after %v", deadConnBound)
		silent.close() // let it end
		<-done
	}
	return true
}

// deadConnServer returns the server of the target's DSN, or skips the
// subtest when the suite cannot point that DSN at its proxy.
func (e *env) deadConnServer() *server {
	e.t.Helper()
	srv, err := parseServer(e.target.DSN)
	if err != nil {
		e.t.Skipf("%v; give Target.DSN in a form the suite can rewrite to run them", err)
	}
	return srv
}

// openThrough opens a pool for the target's DSN through p, closed when the
// subtest ends.
func (e *env) openThrough(p *proxy) *sql.DB {
	e.t.Helper()
	db, err := e.target.open(p.dsn())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	return db
}

// pingThrough pings db, a pool through the proxy, before any blackhole. A
// DSN of a unix socket reaches the server over TCP through the proxy,
// which the server may refuse (pg_hba.conf's "local" and "host" lines
// differ): the subtest is skipped then.
func (e *env) pingThrough(db *sql.DB, srv *server) {
	e.t.Helper()
	err := db.PingContext(e.ctx)
	switch {
	case err == nil:
	case srv.unix:
		e.t.Skipf("the target's DSN names a unix socket, and the server did not take the same connection over TCP through the suite's proxy on 127.0.0.1 (%v); give Target.DSN a TCP host to run the dead-connection properties", err)
	default:
		e.t.Fatalf("ping through the suite's proxy, before any blackhole: %v", err)
	}
}
