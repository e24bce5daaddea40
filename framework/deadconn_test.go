package framework_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// deadConnWait bounds the waits of the dead-connection tests: a statement on
// a dead connection costs the worker a statement timeout, and a dead
// listener is noticed within the driver's bound (10s for both drivers).
const deadConnWait = time.Minute

// A worker whose pool and listener reach the server through a proxy keeps
// working when every connection it has goes silent (packets dropped, sockets
// left open): the handlers' outcomes are written on new connections, events
// enqueued meanwhile are picked up, the log says the listener was lost, and
// stopping the worker while its connections are silent again returns within
// GracePeriod + StopTimeout.
//
// When the proxy blackholes, every handler slot is taken, so no claim
// statement is in flight: no row can be claimed without the worker knowing,
// and the long lease never needs to expire.
func TestDeadConnWorkerRecovers(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := newStore(t, drv) // direct: enqueues and inspects
		proxy := pgtest.NewProxy(t)
		db, err := drv.Open(proxy.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })

		const concurrency = 10
		logs := &messageLog{}
		cfg := framework.Config{
			Schema: s.Schema(), Table: s.Table(), Retention: -1,
			Concurrency: concurrency,
			// A statement times out after RenewEvery (2s); a claim is given
			// up only after 54s without a renewal.
			Lease: time.Minute, RenewEvery: 2 * time.Second,
			PollInterval: 200 * time.Millisecond,
			GracePeriod:  time.Second, StopTimeout: 2 * time.Second,
			Logger: slog.New(logs),
		}
		w, err := framework.New(db, drv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		started := make(chan int64, 100)
		register(t, w, "work", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			started <- c.ID
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		runCtx, stop := context.WithCancel(ctx)
		var runErr error
		ran := make(chan struct{})
		go func() { runErr = w.Run(runCtx); close(ran) }()
		t.Cleanup(func() {
			stop()
			select {
			case <-ran:
			case <-time.After(deadConnWait):
				t.Errorf("Run did not return")
			}
		})
		recv(t, framework.Listening(w), "the worker to listen")

		var ids []int64
		enqueue := func(n int) {
			for range n {
				ids = append(ids, pgtest.Enqueue(t, s, lease.Event{Kind: "work"})[0].ID)
			}
		}
		enqueue(concurrency)
		for range concurrency {
			recv(t, started, "a handler to start")
		}
		if n := logs.count(listenLost); n != 0 {
			t.Fatalf("the listener was lost before the blackhole:\n%s", logs)
		}

		if n := proxy.Blackhole(); n == 0 {
			t.Fatal("blackholed no connection")
		}
		silenced := time.Now()
		enqueue(concurrency)
		close(gate)
		waitDone(t, s, ids, logs)
		t.Logf("%s: %d rows DONE %v after the blackhole", drv.Name(), len(ids), time.Since(silenced).Round(100*time.Millisecond))
		waitLog(t, logs, listenLost)
		t.Logf("%s: the listener lost %v after the blackhole", drv.Name(), time.Since(silenced).Round(100*time.Millisecond))

		// Pickup resumes, by notification once listening again, or by polling.
		enqueue(5)
		waitDone(t, s, ids, logs)

		proxy.Blackhole()
		stopped := time.Now()
		stop()
		bound := cfg.GracePeriod + cfg.StopTimeout
		select {
		case <-ran:
			if runErr != nil {
				t.Errorf("Run: %v", runErr)
			}
			t.Logf("%s: Run returned %v after its context ended, on silent connections (bound %v)",
				drv.Name(), time.Since(stopped).Round(10*time.Millisecond), bound)
		case <-time.After(bound + 30*time.Second):
			// 30s of slack: the bound is the library's; the slack is for a
			// loaded machine's scheduling, not a measure of it.
			t.Errorf("Run still running %v after its context ended, on silent connections; the bound is %v", bound+30*time.Second, bound)
		}
	})
}

// A worker on a pool of one connection handles its events: the listener
// does not take the pool's only connection.
func TestOneConnWorkerHandlesEvents(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		db := pgtest.Open(t, drv)
		db.SetMaxOpenConns(1)
		logs := &messageLog{}
		w, err := framework.New(db, drv, framework.Config{
			Schema: s.Schema(), Table: s.Table(), Retention: -1, Logger: slog.New(logs),
		})
		if err != nil {
			t.Fatal(err)
		}
		register(t, w, "work", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
		start(t, w)
		recv(t, framework.Listening(w), "the worker to listen")
		var ids []int64
		for range 50 {
			ids = append(ids, pgtest.Enqueue(t, s, lease.Event{Kind: "work"})[0].ID)
		}
		waitDone(t, s, ids, logs)
	})
}

// listenLost is what the worker logs when its listener fails.
const listenLost = "not listening for notifications; polling meanwhile"

// waitDone waits until every row of ids is DONE.
func waitDone(t *testing.T, s *lease.Store, ids []int64, logs *messageLog) {
	t.Helper()
	deadline := time.Now().Add(deadConnWait)
	for {
		var pending []string
		for _, id := range ids {
			r, err := s.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != leasework.StatusDone {
				pending = append(pending, fmt.Sprintf("%d:%s", id, r.Status))
			}
		}
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows not DONE after %v: %v\nworker log:\n%s", len(pending), len(ids), deadConnWait, pending, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until the worker has logged msg.
func waitLog(t *testing.T, logs *messageLog, msg string) {
	t.Helper()
	deadline := time.Now().Add(deadConnWait)
	for logs.count(msg) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not log %q within %v; its log:\n%s", msg, deadConnWait, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// messageLog is a slog.Handler that keeps every record's message and
// attributes, for tests that assert what a worker logged.
type messageLog struct {
	mu    sync.Mutex
	lines []string
	msgs  []string
}

func (l *messageLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *messageLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %q", r.Time.Format("15:04:05.000"), r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *messageLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *messageLog) WithGroup(string) slog.Handler      { return l }

func (l *messageLog) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

func (l *messageLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
