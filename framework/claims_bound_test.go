package framework_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// When outcomes are written slowly, the worker stops claiming instead of
// piling up claims: it holds at most twice Concurrency (running, or
// finished and waiting for their outcome). A trigger makes every
// completion take 20ms per row. Handlers freed their slots at once, and
// the worker used to claim on until every row of the table was INPROGRESS,
// each claim to be renewed.
func TestSlowOutcomesBoundTheClaimsHeld(t *testing.T) {
	const concurrency, events = 5, 60
	s := newStore(t, pgtest.Drivers[0].New())
	table := ident(s.Schema()) + "." + ident(s.Table())
	execSQL(t, s, `CREATE FUNCTION `+ident(s.Schema())+`.slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.02); RETURN NEW; END $$`)
	execSQL(t, s, `CREATE TRIGGER slow BEFORE UPDATE ON `+table+`
FOR EACH ROW WHEN (NEW.status = 'DONE') EXECUTE FUNCTION `+ident(s.Schema())+`.slow()`)
	w := newWorker(t, s, framework.Config{Concurrency: concurrency, PollInterval: 20 * time.Millisecond})
	register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	pgtest.EnqueueN(t, s, events, "k")

	var most atomic.Int64
	stop := start(t, w)
	waitFor(t, "every event to be completed", func() bool {
		var inProgress, done int64
		err := s.DB().QueryRowContext(context.Background(), `SELECT
			count(*) FILTER (WHERE status = 'INPROGRESS'), count(*) FILTER (WHERE status = 'DONE')
			FROM `+table).Scan(&inProgress, &done)
		if err != nil {
			t.Fatal(err)
		}
		if inProgress > most.Load() {
			most.Store(inProgress)
		}
		return done == events
	})
	stop()
	if got := most.Load(); got > 2*concurrency {
		t.Errorf("up to %d claims held at once; want at most %d (twice Concurrency)", got, 2*concurrency)
	}
	if got := most.Load(); got < concurrency {
		t.Errorf("at most %d claims held at once; the sampling never saw the worker busy (want at least %d)", got, concurrency)
	}
}
