package netdial_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// slowServer forwards connections to the test server, each only after
// holding it for delay: a server slow to set connections up. It counts the
// connections it accepted.
type slowServer struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newSlowServer(t *testing.T, delay time.Duration) (dsn string, s *slowServer) {
	t.Helper()
	server := pgtest.DSN(t)
	cfg, err := pgconn.ParseConfig(server)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = &slowServer{ln: ln}
	target := net.JoinHostPort(cfg.Host, itoa(cfg.Port))
	network := "tcp"
	if len(cfg.Host) > 0 && cfg.Host[0] == '/' {
		network, target = "unix", cfg.Host+"/.s.PGSQL."+itoa(cfg.Port)
	}
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer client.Close()
				select {
				case <-time.After(delay):
				case <-done:
					return
				}
				upstream, err := net.Dial(network, target)
				if err != nil {
					return
				}
				defer upstream.Close()
				go func() {
					<-done
					client.Close()
					upstream.Close()
				}()
				go func() { _, _ = io.Copy(upstream, client); upstream.Close() }()
				_, _ = io.Copy(client, upstream)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(done)
		s.wg.Wait()
	})
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return "host=" + host + " port=" + port + " user=" + cfg.User + " dbname=" + cfg.Database + " sslmode=disable", s
}

func itoa(p uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + p%10)
		p /= 10
		if p == 0 {
			return string(b[i:])
		}
	}
}

// A connection set-up slower than the statement that needs it is not
// wasted: the statement gets its context's error, the set-up goes on, and
// the next statement gets that connection, without a second set-up.
// Through both drivers' Open.
func TestASetUpItsCallerLeftGoesToTheNextCaller(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		dsn, server := newSlowServer(t, 500*time.Millisecond)
		db, err := drv.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })

		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = db.PingContext(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a ping with 50ms for a 500ms set-up = %v; want context.DeadlineExceeded", err)
		}
		// Once the set-up is done its connection is kept without a
		// goroutine (a program whose worker stopped leaves none running).
		// A liveness bound: the set-up takes about 500ms.
		for bound := time.Now().Add(2 * time.Minute); setUpRunning(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(bound) {
				t.Fatal("2 minutes after the ping gave up, its set-up still has a goroutine")
			}
		}
		// A liveness bound only: the kept set-up answers in about 450ms.
		long, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var one int
		if err := db.QueryRowContext(long, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("the next statement: %d, %v; want 1 through the kept connection", one, err)
		}
		if n := server.accepted.Load(); n != 1 {
			t.Errorf("the server accepted %d connections; want 1: the first caller's set-up, handed to the next", n)
		}
	})
}

// A pool whose every statement allows less time than a connection's
// set-up takes still gets its connections: each try's set-up goes on, and
// a later try gets it. Before, each try abandoned its set-up half done and
// none ever succeeded. Through both drivers' Open.
func TestStatementsShorterThanASetUpStillGetConnections(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		dsn, _ := newSlowServer(t, 500*time.Millisecond)
		db, err := drv.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// A liveness bound only: the second or third try succeeds.
		bound := time.Now().Add(2 * time.Minute)
		for tries := 1; ; tries++ {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := db.PingContext(ctx)
			cancel()
			if err == nil {
				t.Logf("the ping of try %d succeeded", tries)
				return
			}
			if time.Now().After(bound) {
				t.Fatalf("%d tries of 200ms each, none got a connection set up in 500ms: %v", tries, err)
			}
		}
	})
}

// setUpRunning reports whether a goroutine of KeepLate's set-ups runs.
func setUpRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "netdial.(*lateConnector).setUp")
}
