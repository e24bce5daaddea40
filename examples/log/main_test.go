package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestMain doubles as the worker process: the supervisor re-executes the
// test binary, as it re-executes the example's own binary.
func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "worker" {
		os.Exit(workerMain())
	}
	pgtest.Main(m)
}

// crashWatcher collects the output and, when the crashing worker announces
// its exit, expires that worker's leases: the fixture stands in for waiting
// out the lease.
type crashWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	store *lease.Store
	fired bool
	err   error
}

func (c *crashWatcher) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if !c.fired && strings.Contains(c.buf.String(), "crashing now") {
		c.fired = true
		// The process may take a moment more to exit; anything it writes
		// after this is rejected by the guard, as it would be after a real
		// expiry.
		_, c.err = leasetest.ExpireWorkerLeases(context.Background(), c.store, "worker-1")
	}
	return len(p), nil
}

func (c *crashWatcher) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func TestExampleRecoversCrashedWorker(t *testing.T) {
	drv := pgxdriver.New()
	db := pgtest.Open(t, drv)
	schema := pgtest.SchemaName()
	store, err := lease.New(db, drv, lease.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.DropSchema(context.Background()) })
	out := &crashWatcher{store: store}
	o := options{
		dsn: pgtest.DSN(t), driver: "pgx", events: 8, workers: 2, crash: true,
		lease:  time.Hour, // never runs out by itself: the fixture expires it
		schema: schema, deadline: 2 * time.Minute, out: out,
	}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out)
	}
	if out.err != nil {
		t.Fatal(out.err)
	}
	text := out.String()
	for _, want := range []string{"8 of 8 events DONE", "worker-1 exited with status 3", "worker-2 stopped gracefully", "generation=2 attempt=2"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	rows, err := store.List(context.Background(), lease.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recovered := 0
	for _, r := range rows {
		if r.Status != leasework.StatusDone {
			t.Errorf("row %d is %s, want DONE", r.ID, r.Status)
		}
		if r.Generation == 2 {
			recovered++
		}
	}
	if len(rows) != 8 || recovered == 0 {
		t.Fatalf("%d rows, %d at generation 2; want 8 rows and at least one recovered", len(rows), recovered)
	}
}

func TestOptionsValidate(t *testing.T) {
	good := options{driver: "pgx", events: 1, workers: 1, lease: time.Second, deadline: time.Minute}
	if err := good.validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, bad := range []func(o *options){
		func(o *options) { o.driver = "mysql" },
		func(o *options) { o.events = 0 },
		func(o *options) { o.workers = 0 },
		func(o *options) { o.crash = true }, // one worker cannot recover its own crash
		func(o *options) { o.lease = time.Millisecond },
		func(o *options) { o.deadline = 0 },
	} {
		o := good
		bad(&o)
		if err := o.validate(); err == nil {
			t.Errorf("validate(%+v) = nil; want an error", o)
		}
	}
}
