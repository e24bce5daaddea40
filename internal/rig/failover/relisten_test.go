package failover

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An event enqueued on the new primary while a worker could not connect
// to it notifies nobody: the notification is lost. The worker must still
// claim it as soon as it is back, not at its next poll (ten minutes away):
// a worker that listens again claims at once. The worker's role is kept
// from logging in across the failover, so the event is surely enqueued
// while the worker is away.
func TestEventEnqueuedWhileWorkerReconnectsIsClaimedAtOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		p := newPair(t, true)
		servers := p.servers()
		schema := pgtest.SchemaName()
		admin := openStore(t, pgtest.Drivers[0].New(), dsn(pgtest.Drivers[0].New(), "admin", servers...), schema, true)
		exec := func(q string) {
			t.Helper()
			if err := retryConn(t, admin.Driver(), q, func() error { _, err := admin.DB().ExecContext(ctx, q); return err }); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec("CREATE ROLE lw_worker LOGIN SUPERUSER")

		workerDSN := strings.Replace(strings.Replace(dsn(drv, "worker", servers...),
			"postgres://postgres@", "postgres://lw_worker@", 1), "user=postgres", "user=lw_worker", 1)
		db, err := drv.Open(workerDSN)
		must(t, "open the worker's pool", err)
		defer db.Close()
		w, err := framework.New(db, drv, framework.Config{
			WorkerID: "worker", Schema: schema, Lease: 3 * time.Second,
			PollInterval: loadPollInterval, Retention: -1, Logger: testLogger(t),
		})
		must(t, "configure the worker", err)
		done := make(chan string, 2)
		if err := w.Register("k", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			done <- c.EventID
			return nil
		}), framework.RetryPolicy{}); err != nil {
			t.Fatalf("register: %v", err)
		}
		runCtx, stop := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- w.Run(runCtx) }()
		defer func() {
			stop()
			if err := <-stopped; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		// Any session of the worker's role: while the role cannot log in
		// there is none, its listener included.
		sessions := func() (n int) {
			query(t, admin.DB(), "SELECT count(*) FROM pg_stat_activity WHERE usename = 'lw_worker'", nil, &n)
			return n
		}
		enqueue := func(id string) {
			t.Helper()
			if err := retryConn(t, admin.Driver(), "enqueue", func() error {
				_, err := pgtest.EnqueueCommitted(ctx, admin, lease.Event{Kind: "k", EventID: id})
				return err
			}); err != nil {
				t.Fatalf("enqueue %s: %v", id, err)
			}
		}
		enqueue("before")
		select {
		case got := <-done:
			if got != "before" {
				t.Fatalf("handled %q; want before", got)
			}
		case <-time.After(waitBound):
			t.Fatalf("the event enqueued before the failover was not handled within %v", waitBound)
		}

		// The failover, with the worker's role refused at login meanwhile.
		exec("ALTER ROLE lw_worker NOLOGIN")
		must(t, "wait for the standby to catch up", p.primary.CaughtUp(ctx))
		must(t, "crash the primary", p.primary.Crash())
		p.promote(t)
		enqueue("during")
		if n := sessions(); n != 0 {
			t.Fatalf("the worker has %d sessions on the new primary while its role cannot log in", n)
		}
		back := time.Now()
		exec("ALTER ROLE lw_worker LOGIN")
		select {
		case got := <-done:
			if got != "during" {
				t.Fatalf("handled %q; want during", got)
			}
			t.Logf("the event enqueued during the failover was claimed %v after the worker could connect again", time.Since(back).Round(time.Millisecond))
		case <-time.After(waitBound):
			t.Fatalf("the event enqueued while the worker was away was not claimed within %v of its return (poll interval %v)", waitBound, loadPollInterval)
		}

		// It listens again: with nothing to do and its next poll ten
		// minutes away, only a notification brings it the next event.
		// (Its listening session cannot be told by its query text: after
		// 5s without a notification the drivers ping on it.)
		enqueue("after")
		select {
		case got := <-done:
			if got != "after" {
				t.Fatalf("handled %q; want after", got)
			}
		case <-time.After(waitBound):
			t.Fatalf("the event enqueued after the worker's return was not claimed within %v (poll interval %v): it does not listen again", waitBound, loadPollInterval)
		}
	})
}
