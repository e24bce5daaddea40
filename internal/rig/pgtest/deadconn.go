package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// DeadConnBound bounds how long the dead-connection checks wait for a call
// to return by itself: far above the bounds the drivers document, so that
// reaching it means the call would have waited forever.
const DeadConnBound = 30 * time.Second

// deadline is the context deadline the checks give a statement (first
// try).
const deadline = 200 * time.Millisecond

// DeadStatements checks that drv bounds a statement, a query whose rows are
// being read and a transaction, each on a connection blackholed by a
// [Proxy] while its context has a deadline: the call returns with an error
// that [leasework.Classify] calls a lost connection (a transaction's
// connection goes back to the pool), within [DeadConnBound]. It logs how
// long after the deadline each call returned.
func DeadStatements(t *testing.T, drv leasework.Driver) {
	cases := []struct {
		name string
		// run blackholes db's connections with silence while its ctx,
		// which has a deadline, is in force, and returns the error that
		// the call got.
		run func(ctx context.Context, db *sql.DB, silence func()) error
	}{
		{"statement", func(ctx context.Context, db *sql.DB, silence func()) error {
			silence()
			_, err := db.ExecContext(ctx, `SELECT 1`)
			return err
		}},
		{"rows", func(ctx context.Context, db *sql.DB, silence func()) error {
			// In the select list, generate_series streams its rows.
			rows, err := db.QueryContext(ctx, `SELECT generate_series(1, 1000000000)`)
			if err != nil {
				return fmt.Errorf("before the blackhole: %w", err)
			}
			defer rows.Close()
			if !rows.Next() {
				return fmt.Errorf("before the blackhole: no first row: %w", rows.Err())
			}
			silence()
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				return err
			}
			return errors.New("read every row on a blackholed connection")
		}},
		{"transaction", func(ctx context.Context, db *sql.DB, silence func()) error {
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
			// The transaction's end must give the pool's only connection
			// back: database/sql rolls back when its context ends.
			ping, cancel := context.WithTimeout(context.Background(), DeadConnBound)
			defer cancel()
			if perr := db.PingContext(ping); perr != nil {
				return errors.New("the pool did not get its connection back: " + perr.Error())
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// An attempt tests nothing when its deadline passes before
			// the blackhole (a loaded machine slow to return the first
			// row): it is made again, on a fresh connection, with twice
			// the deadline. The deadline is the fixture's, not what is
			// checked: the call must end soon after it, whatever it is.
			d := deadline
			for try := 1; ; try++ {
				if deadStatement(t, drv, d, tc.run) {
					return
				}
				if try == deadConnTries {
					t.Fatalf("%s: in %d tries, up to a deadline of %v, the deadline never left time to blackhole the connection", drv.Name(), try, d)
				}
				t.Logf("%s: the deadline of %v passed before the blackhole; trying again with %v", drv.Name(), d, 2*d)
				d *= 2
			}
		})
	}
}

// deadConnTries bounds the attempts of a dead-connection check whose
// deadline passes before the blackhole: the last one's deadline is 25.6s,
// room for a machine loaded far beyond its cores.
const deadConnTries = 8

// deadStatement makes one attempt of a dead-statement check, with a
// context whose deadline is d from the start. It reports false, having
// checked nothing, when the deadline passed before run blackholed the
// connection.
func deadStatement(t *testing.T, drv leasework.Driver, d time.Duration, run func(ctx context.Context, db *sql.DB, silence func()) error) bool {
	t.Helper()
	proxy := NewProxy(t)
	db, err := drv.Open(proxy.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	silenced := make(chan bool, 1) // whether the deadline was still ahead
	silence := func() {
		silenced <- ctx.Err() == nil
		if n := proxy.Blackhole(); n != 1 {
			t.Errorf("blackholed %d connections, want 1", n)
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
		if !inTime && ctx.Err() != nil {
			return false
		}
		dl, _ := ctx.Deadline()
		t.Logf("%s: returned %v after the deadline: %v", drv.Name(), time.Since(dl).Round(time.Millisecond), err)
		if c := leasework.Classify(drv, err); c != leasework.ClassConnection {
			t.Errorf("error %v (%T) is classified %q, want %q", err, err, c, leasework.ClassConnection)
		}
	case <-time.After(DeadConnBound):
		t.Fatalf("%s: still waiting for a blackholed connection %v after the deadline", drv.Name(), DeadConnBound)
	}
	return true
}

// DeadListener checks that a listener of drv, whose connection a [Proxy]
// blackholes, notices: Wait returns an error by itself within
// [DeadConnBound], and so does Close. It logs how long each took.
func DeadListener(t *testing.T, drv leasework.Driver) {
	n, ok := drv.(leasework.Notifier)
	if !ok {
		t.Fatalf("%s cannot listen", drv.Name())
	}
	ctx := context.Background()
	proxy := NewProxy(t)
	db, err := drv.Open(proxy.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	direct := Open(t, drv)
	channel := SchemaName()
	l, err := n.Listen(ctx, db, channel)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.ExecContext(ctx, `SELECT pg_notify($1, 'before')`, channel); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, DeadConnBound)
	defer cancel()
	if payload, err := l.Wait(wait); err != nil || payload != "before" {
		t.Fatalf("Wait before the blackhole: %q, %v; want the notification", payload, err)
	}

	if proxy.Blackhole() == 0 {
		t.Fatal("blackholed no connection")
	}
	start := time.Now()
	// A notification sent now never arrives.
	if _, err := direct.ExecContext(ctx, `SELECT pg_notify($1, 'lost')`, channel); err != nil {
		t.Fatal(err)
	}
	wait, cancel = context.WithTimeout(ctx, DeadConnBound)
	defer cancel()
	payload, err := l.Wait(wait)
	switch {
	case wait.Err() != nil:
		t.Errorf("%s: Wait on a blackholed listener waited %v without noticing (%q, %v)", drv.Name(), time.Since(start).Round(time.Millisecond), payload, err)
	case err == nil:
		t.Errorf("%s: Wait on a blackholed listener returned %q, no error", drv.Name(), payload)
	default:
		t.Logf("%s: the listener noticed after %v: %v", drv.Name(), time.Since(start).Round(time.Millisecond), err)
	}

	start = time.Now()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		t.Logf("%s: Close returned after %v: %v", drv.Name(), time.Since(start).Round(time.Millisecond), err)
	case <-time.After(DeadConnBound):
		t.Errorf("%s: Close of a blackholed listener still waiting after %v", drv.Name(), DeadConnBound)
		proxy.Close() // let it end
		<-closed
	}
}

// DeadHandshake checks that drv bounds the set-up of a connection to a
// server that accepts it and then says nothing (an overloaded or stopped
// server process, a blackhole past the accept): opening the connection for
// a ping ends with an error when the ping's context ends, though the DSN
// allows ten minutes, and when the DSN's connect_timeout passes, though the
// context has no deadline; each within [DeadConnBound]. It logs how long
// each took.
func DeadHandshake(t *testing.T, drv leasework.Driver) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(io.Discard, c) }() // read, never answer
		}
	}()
	silent := withAddress(DSN(t), ln.Addr().(*net.TCPAddr))
	for _, c := range []struct {
		name, connectTimeout string
		ctxDeadline          time.Duration // 0: none
	}{
		{"the context's deadline", "600", deadline},
		{"connect_timeout", "1", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := drv.Open(withSetting(silent, "connect_timeout", c.connectTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			if c.ctxDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctxDeadline)
				defer cancel()
			}
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- db.PingContext(ctx) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("%s: a ping of a server that never answers succeeded", drv.Name())
				}
				t.Logf("%s: the connection's set-up ended after %v: %v", drv.Name(), time.Since(start).Round(time.Millisecond), err)
			case <-time.After(DeadConnBound):
				t.Errorf("%s: the set-up of a connection to a silent server still waiting after %v", drv.Name(), DeadConnBound)
				ln.Close()
				mu.Lock()
				for _, c := range accepted {
					c.Close()
				}
				mu.Unlock()
				<-done
			}
		})
	}
}

// withSetting returns dsn, a URL or key=value connection string, with the
// setting name=value.
func withSetting(dsn, name, value string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(name, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return fmt.Sprintf("%s %s=%s", dsn, name, value)
}
