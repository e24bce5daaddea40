package framework_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"

	"github.com/leasework/leasework"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	_ "github.com/lib/pq" // registers "postgres" for the foreign pool
)

// listenUnsupported is what the worker logs, once, when its driver can
// never listen on its pool.
const listenUnsupported = "driver cannot listen for notifications on this pool; polling only"

// A worker on a lib/pq pool that driver/pq did not open (its DSN is out of
// reach, so it cannot listen) polls: it handles its events, says once that
// it polls only, and never retries LISTEN with a warning.
func TestForeignPoolPollsAndSaysSoOnce(t *testing.T) {
	drv := pqdriver.New()
	s := newStore(t, drv)
	db, err := sql.Open("postgres", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logs := &messageLog{}
	w, err := framework.New(db, drv, framework.Config{
		Schema: s.Schema(), Table: s.Table(), Retention: -1, Logger: slog.New(logs),
		PollInterval: framework.MinPollInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	register(t, w, "work", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	stop := start(t, w)
	waitLog(t, logs, listenUnsupported)
	var ids []int64
	for range 20 {
		ids = append(ids, pgtest.Enqueue(t, s, lease.Event{Kind: "work"})[0].ID)
	}
	waitDone(t, s, ids, logs)
	stop()
	if n := logs.count(listenUnsupported); n != 1 {
		t.Errorf("logged %q %d times; want once\n%s", listenUnsupported, n, logs)
	}
	if n := logs.count(listenLost); n != 0 {
		t.Errorf("logged %q %d times; want never: a pool it can never listen on is not retried\n%s", listenLost, n, logs)
	}
}
