package failover

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// waitBound bounds each wait of the load runs for a condition: generous,
// so that only a run that is stuck fails, however busy the machine.
const waitBound = 4 * time.Minute

// The workers' poll interval in the load runs: longer than any wait of the
// test, so that work found after a failover is found through a
// notification or the poll a worker makes when it listens again, never
// through the timer.
const loadPollInterval = 10 * time.Minute

// loadConcurrency is each load worker's Concurrency.
const loadConcurrency = 50

// loadRun is one run of events through workers of both drivers while the
// primary fails over.
type loadRun struct {
	// dsn returns a connection string, in drv's dialect, naming every
	// server that may become the primary, with application_name app.
	dsn func(drv leasework.Driver, app string) string
	// events is how many events the producer acknowledges at least. It
	// goes on, slower, until the workers have claimed on the last new
	// primary, so that no failover, however long, finds the work done.
	events int
	// failovers are run one after another while events flow; each returns
	// once the new primary accepts writes.
	failovers []func(t *testing.T)
}

// loadResult is what a run measured.
type loadResult struct {
	acked, done, receipts, duplicates int
	staleAccepted, outcomeWrites      int
	recovery                          []time.Duration // per failover: its start to the first claim on the new primary
	pickupAfter                       time.Duration   // the slowest worker's, of an event of its own enqueued after the last failover
	counters                          map[string]framework.Counters
}

func (r loadResult) String() string {
	var rec []string
	for _, d := range r.recovery {
		rec = append(rec, d.Round(time.Millisecond).String())
	}
	return fmt.Sprintf("events=%d done=%d lost=%d receipts=%d duplicates=%d outcome_writes=%d stale_accepted=%d failovers=%d recovery=%v pickup_after=%v",
		r.acked, r.done, r.acked-r.done, r.receipts, r.duplicates, r.outcomeWrites, r.staleAccepted,
		len(r.recovery), rec, r.pickupAfter.Round(time.Millisecond))
}

// run runs the load and checks from the final primary that every
// acknowledged event is DONE with a receipt, that every outcome write was
// made by the claim's owner at its generation, and that the workers listen
// again. Failures are the test's; the result is for the log.
func (l loadRun) run(t *testing.T) loadResult {
	t.Helper()
	ctx := context.Background()
	schema := pgtest.SchemaName()
	admin := openStore(t, pgtest.Drivers[0].New(), l.dsn(pgtest.Drivers[0].New(), "admin"), schema, true)
	table := admin.QualifiedTable()
	if _, err := admin.DB().ExecContext(ctx, fmt.Sprintf(auditSQL, ident(schema), table)); err != nil {
		t.Fatalf("create the audit trigger and the receipts table: %v", err)
	}

	// The first claim on each timeline: how the test sees work start on a
	// new primary, whose generations all lie at or above its timeline's
	// floor, (timeline - 1) << 32.
	var firstMu sync.Mutex
	firstOn := map[int64]time.Time{} // by timeline - 1
	claimed := func(gen int64) {
		firstMu.Lock()
		defer firstMu.Unlock()
		if _, seen := firstOn[gen>>32]; !seen {
			firstOn[gen>>32] = time.Now()
		}
	}

	// Receipts written, duplicates included: the producer's pace past
	// l.events.
	var handled atomic.Int64

	// Workers, one per driver: each handler writes a receipt in a
	// transaction of its own, the stand-in for an external system.
	runCtx, stopWorkers := context.WithCancel(ctx)
	var workers []*framework.Worker
	var running sync.WaitGroup
	for _, d := range pgtest.Drivers {
		drv := d.New()
		name := "worker-" + drv.Name()
		db, err := drv.Open(l.dsn(drv, name))
		must(t, "open "+name+"'s pool", err)
		db.SetMaxIdleConns(loadConcurrency) // as docs/operations.md advises for a worker's pool
		t.Cleanup(func() { db.Close() })
		w, err := framework.New(db, drv, framework.Config{
			WorkerID: name, Schema: schema, Concurrency: loadConcurrency, Lease: 3 * time.Second,
			PollInterval: loadPollInterval, Retention: -1, Logger: testLogger(t),
		})
		must(t, "configure "+name, err)
		receipt := fmt.Sprintf("INSERT INTO %s.receipts (event_id, generation, worker) VALUES ($1, $2, $3)", ident(schema))
		h := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			claimed(c.Generation)
			_, err := db.ExecContext(ctx, receipt, c.EventID, c.Generation, name)
			if err == nil {
				handled.Add(1)
			}
			return err
		})
		// "k" is the load; the worker's own kind is for the check that it
		// listens again (see below).
		for _, kind := range []string{"k", name} {
			if err := w.Register(kind, h, framework.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxAttempts: 1000}); err != nil {
				t.Fatalf("register %s on %s: %v", kind, name, err)
			}
		}
		workers = append(workers, w)
		running.Add(1)
		go func() {
			defer running.Done()
			if err := w.Run(runCtx); err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		}()
	}
	defer func() { stopWorkers(); running.Wait() }()

	// The producer: batches of 20 through each driver in turn, each batch
	// acknowledged when its commit returns nil. A batch whose commit failed
	// may or may not exist; its ids are not counted, and the next batch
	// takes new ones.
	var acked []string
	var ackedN atomic.Int64
	var failingOver atomic.Bool // until the workers have claimed on the last new primary
	failingOver.Store(len(l.failovers) > 0)
	defer failingOver.Store(false)
	producerDone := make(chan struct{})
	var producers []*lease.Store
	for _, d := range pgtest.Drivers {
		drv := d.New()
		producers = append(producers, openStore(t, drv, l.dsn(drv, "producer-"+drv.Name()), schema, false))
	}
	go func() {
		defer close(producerDone)
		// Past l.events, a batch every 100ms while fewer than 100 events
		// wait: work keeps flowing through the failovers left without
		// piling up, however slowly a loaded machine handles it.
		pace := time.NewTicker(100 * time.Millisecond)
		defer pace.Stop()
		for batch := 0; len(acked) < l.events || failingOver.Load(); batch++ {
			if len(acked) >= l.events {
				<-pace.C
				if int64(len(acked))-handled.Load() >= 100 {
					continue
				}
			}
			s := producers[batch%len(producers)]
			var events []lease.Event
			for i := range 20 {
				events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprintf("b%d-%d", batch, i)})
			}
			if _, err := pgtest.EnqueueCommitted(ctx, s, events...); err != nil {
				time.Sleep(10 * time.Millisecond) // the primary is away: try again
				continue
			}
			for _, e := range events {
				acked = append(acked, e.EventID)
			}
			ackedN.Store(int64(len(acked)))
		}
	}()

	var res loadResult
	for i, failover := range l.failovers {
		// Fail over once the producer is well into its share of events.
		share := int64(l.events * (i + 1) / (len(l.failovers) + 1))
		waitProgress(t, func() int { return int(ackedN.Load()) },
			func() string {
				return fmt.Sprintf("the producer to enqueue %d events (%d so far)", share, ackedN.Load())
			},
			func() bool { return ackedN.Load() >= share })
		start := time.Now()
		failover(t)
		var floor int64
		if err := retryConn(t, admin.Driver(), "read the new timeline", func() error {
			return admin.DB().QueryRowContext(ctx, timelineFloorSQL).Scan(&floor)
		}); err != nil {
			t.Fatalf("failover %d: %v", i+1, err)
		}
		waitUntil(t, fmt.Sprintf("a claim on the new primary of failover %d", i+1), func() bool {
			firstMu.Lock()
			defer firstMu.Unlock()
			_, ok := firstOn[floor>>32]
			return ok
		})
		firstMu.Lock()
		res.recovery = append(res.recovery, firstOn[floor>>32].Sub(start))
		firstMu.Unlock()
	}
	failingOver.Store(false)
	<-producerDone
	res.acked = len(acked)

	// Every acknowledged event finishes.
	var lastErr error
	waitProgress(t, func() int { return res.done }, func() string {
		// What the wait saw last: how far it got, and where the rest are.
		var states string
		admin.DB().QueryRowContext(ctx, "SELECT coalesce(string_agg(status || '=' || n, ' '), '') FROM (SELECT status, count(*) AS n FROM "+table+
			" WHERE event_id = ANY($1) AND status <> 'DONE' GROUP BY status) AS s", admin.Driver().Array(acked)).Scan(&states)
		return fmt.Sprintf("every acknowledged event to be DONE (%d of %d DONE; the rest: %s; last error: %v)", res.done, len(acked), states, lastErr)
	}, func() bool {
		var n int
		lastErr = admin.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE status = 'DONE' AND event_id = ANY($1)",
			admin.Driver().Array(acked)).Scan(&n)
		if lastErr == nil {
			res.done = n
		}
		return lastErr == nil && n == len(acked)
	})

	// Each worker listens again: one more event, of a kind only that
	// worker handles, is found at once, though the worker has nothing
	// left to do and its next poll is loadPollInterval away. (The LISTEN
	// sessions cannot be told from pg_stat_activity: after 5s without a
	// notification the drivers ping on them, and their last query is the
	// ping.)
	for _, w := range workers {
		sent := time.Now()
		if err := retryConn(t, admin.Driver(), "enqueue the event after the failovers for "+w.ID(), func() error {
			_, err := pgtest.EnqueueCommitted(ctx, admin, lease.Event{Kind: w.ID(), EventID: "after-" + w.ID()})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, w.ID()+" to be woken by a notification for the event after the failovers", func() bool {
			var done bool
			err := admin.DB().QueryRowContext(ctx, "SELECT status = 'DONE' FROM "+table+" WHERE event_id = $1", "after-"+w.ID()).Scan(&done)
			return err == nil && done
		})
		res.pickupAfter = max(res.pickupAfter, time.Since(sent))
	}
	stopWorkers()
	running.Wait()
	res.counters = map[string]framework.Counters{}
	for _, w := range workers {
		res.counters[w.ID()] = w.Counters()
	}

	// The receipts and the audit of outcome writes, from the last primary.
	query(t, admin.DB(), fmt.Sprintf(`SELECT count(*), count(*) - count(DISTINCT event_id) FROM %s.receipts`, ident(schema)),
		nil, &res.receipts, &res.duplicates)
	var withoutReceipt int
	query(t, admin.DB(), fmt.Sprintf(`SELECT count(*) FROM %s AS e WHERE e.status = 'DONE'
		AND NOT EXISTS (SELECT FROM %s.receipts AS r WHERE r.event_id = e.event_id)`, table, ident(schema)), nil, &withoutReceipt)
	if withoutReceipt != 0 {
		t.Errorf("%d DONE events have no receipt", withoutReceipt)
	}
	query(t, admin.DB(), fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE writer IS DISTINCT FROM owner OR new_generation <> old_generation)
		FROM %s.audit`, ident(schema)), nil, &res.outcomeWrites, &res.staleAccepted)
	if res.staleAccepted != 0 {
		t.Errorf("%d outcome writes were accepted from a session other than the claim's owner, or changed the generation", res.staleAccepted)
	}
	var notFinal int
	query(t, admin.DB(), fmt.Sprintf(`SELECT count(*) FROM %s AS e WHERE e.status = 'DONE' AND NOT EXISTS (
		SELECT FROM %s.audit AS a WHERE a.id = e.id AND a.new_status = 'DONE' AND a.new_generation = e.generation AND a.writer = e.worker)`,
		table, ident(schema)), nil, &notFinal)
	if notFinal != 0 {
		t.Errorf("%d DONE rows were not completed by their last claim's owner at its generation", notFinal)
	}
	if res.done != res.acked {
		t.Errorf("%d of %d acknowledged events are DONE; want all", res.done, res.acked)
	}
	return res
}

// auditSQL records every outcome write, the row leaving INPROGRESS, with
// the claim it ended and the session that wrote it (the worker's
// application_name), and keeps the receipts table. %[1]s is the schema,
// %[2]s the events table.
const auditSQL = `
CREATE TABLE %[1]s.receipts (event_id text NOT NULL, generation bigint NOT NULL, worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE %[1]s.audit (id bigint NOT NULL, new_status text NOT NULL, old_generation bigint NOT NULL,
    new_generation bigint NOT NULL, owner text, writer text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION %[1]s.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO %[1]s.audit (id, new_status, old_generation, new_generation, owner, writer)
    VALUES (OLD.id, NEW.status, OLD.generation, NEW.generation, OLD.worker, current_setting('application_name'));
    RETURN NULL;
END $$;
CREATE TRIGGER audit AFTER UPDATE ON %[2]s FOR EACH ROW
    WHEN (OLD.status = 'INPROGRESS' AND NEW.status <> 'INPROGRESS')
    EXECUTE FUNCTION %[1]s.audit();`

// timelineFloorSQL is the floor of the primary's generations, as the claim
// computes it.
const timelineFloorSQL = `SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32`

// waitUntil polls cond until it holds, failing the test after
// waitBound, a liveness bound for a loaded machine.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilWith(t, func() string { return what }, cond)
}

// waitProgress is [waitUntilWith] for a wait that makes progress, such as
// events finishing: it fails only when progress() has not grown for
// waitBound, so a slow machine that keeps finishing events is waited for,
// and a stuck one is not.
func waitProgress(t *testing.T, progress func() int, what func() string, cond func() bool) {
	t.Helper()
	last, since := progress(), time.Now()
	for !cond() {
		if p := progress(); p != last {
			last, since = p, time.Now()
		}
		if time.Since(since) > waitBound {
			t.Fatalf("waited %v without progress for %s", waitBound, what())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitUntilWith is [waitUntil] with what told at the failure, so that it
// can say what the wait last saw.
func waitUntilWith(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitBound, what())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func ident(name string) string { return lease.QuoteIdent(name) }
