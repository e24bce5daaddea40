package framework_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// oldOutcomeTries is how many failed writes the outcome writer once allowed
// an outcome before it gave it up, whatever its lease: an outage that
// outlasts that many writes (about 2s of backoff) is one the worker used to
// give its outcomes up in.
const oldOutcomeTries = 8

// workerBehindProxy makes a worker on s's table whose pool reaches the
// server through a proxy of its own, so that the test can take the
// database away from the worker alone. s stays reachable, to enqueue,
// inspect and arrange rows.
func workerBehindProxy(t *testing.T, s *lease.Store, drv leasework.Driver, cfg framework.Config) (*framework.Worker, *pgtest.Proxy) {
	t.Helper()
	proxy := pgtest.NewProxy(t)
	db, err := drv.Open(proxy.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.Schema, cfg.Table, cfg.Retention = s.Schema(), s.Table(), -1
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	w, err := framework.New(db, drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, proxy
}

// runLog records every handler run, per event id.
type runLog struct {
	mu   sync.Mutex
	runs map[string][]leasework.Claim
	n    int
}

func (l *runLog) add(c leasework.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string][]leasework.Claim{}
	}
	l.runs[c.EventID] = append(l.runs[c.EventID], c)
	l.n++
}

func (l *runLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// heldOf counts the rows in progress at a generation some handler of runs
// ran: the claims a worker holds, not those of a claim whose answer it lost.
func heldOf(t *testing.T, s *lease.Store, runs *runLog) int {
	t.Helper()
	rows, err := s.DB().Query(`SELECT id, generation FROM ` + s.QualifiedTable() + ` WHERE status = 'INPROGRESS'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	inProgress := map[[2]int64]bool{}
	for rows.Next() {
		var id, gen int64
		if err := rows.Scan(&id, &gen); err != nil {
			t.Fatal(err)
		}
		inProgress[[2]int64{id, gen}] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	runs.mu.Lock()
	defer runs.mu.Unlock()
	held := 0
	for _, ran := range runs.runs {
		for _, c := range ran {
			if inProgress[[2]int64{c.ID, c.Generation}] {
				held++
			}
		}
	}
	return held
}

func (l *runLog) of(eventID string) []leasework.Claim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]leasework.Claim(nil), l.runs[eventID]...)
}

// A worker whose database goes away (connections closed, new ones refused,
// as in a server restart) after its handlers returned, for longer than the
// writer once allowed an outcome but well within the lease, records every
// outcome once the database is back: each event DONE at its first claim's
// generation, its handler run once, no outcome abandoned. It used to give
// the outcomes up after 8 failed writes (about 2s) with most of their lease
// left, and the events ran again when their leases expired.
func TestOutcomeSurvivesAnOutageShorterThanItsLease(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const n = 20
		// 20s of lease, renewed every 2s: each claim is confirmed for at
		// least 16s past the outage's start, the outage lasts 5s (and at
		// least the old bound of writes).
		const leaseLen, outage = 20 * time.Second, 5 * time.Second
		s := newStore(t, drv)
		w, proxy := workerBehindProxy(t, s, drv, framework.Config{
			Concurrency: n, Lease: leaseLen, RenewEvery: 2 * time.Second, PollInterval: 100 * time.Millisecond,
		})
		var runs runLog
		gate := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			runs.add(*c)
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		rows := pgtest.EnqueueN(t, s, n, "k")
		start(t, w)
		waitFor(t, "every event's first run", func() bool { return runs.count() == n })

		proxy.Refuse()
		down := time.Now()
		close(gate) // every outcome is now to be written while the database is away
		waitFor(t, fmt.Sprintf("the outage to last %v and %d failed outcome writes (or an outcome abandoned)", outage, oldOutcomeTries), func() bool {
			c := w.Counters()
			return c.OutcomesAbandoned > 0 || (c.OutcomeWriteErrors >= oldOutcomeTries && time.Since(down) >= outage)
		})
		proxy.Resume()
		t.Logf("%s: the database was away %v; %d outcome writes failed meanwhile",
			drv.Name(), time.Since(down).Round(100*time.Millisecond), w.Counters().OutcomeWriteErrors)

		waitFor(t, "every outcome to be settled", func() bool {
			c := w.Counters()
			return c.Completed+c.OutcomesAbandoned+c.StaleRejections >= n
		})
		if c := w.Counters(); c.Completed != n || c.OutcomesAbandoned != 0 || c.RerunsFromAbandonedOutcomes != 0 || c.StaleRejections != 0 || c.Reclaimed != 0 {
			t.Fatalf("counters %+v; want %d completed, none abandoned, none re-run, rejected or reclaimed", c, n)
		}
		for _, e := range rows {
			r, err := s.Get(context.Background(), e.ID)
			if err != nil {
				t.Fatal(err)
			}
			ran := runs.of(r.EventID)
			if len(ran) != 1 {
				t.Errorf("event %s ran %d times; want once", r.EventID, len(ran))
				continue
			}
			if r.Status != leasework.StatusDone || r.Generation != ran[0].Generation {
				t.Errorf("event %s: %s at generation %d; want DONE at its first claim's generation %d", r.EventID, r.Status, r.Generation, ran[0].Generation)
			}
		}
	})
}

// When the database stays away past the claim's lease (by the worker's own
// record of its last confirmed deadline, less the margin), the outcome is
// abandoned, no earlier, counted as a re-run to come, and the event does
// run again, once, at the next generation.
func TestOutcomeAbandonedWhenAnOutageOutlastsItsLease(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const leaseLen = 6 * time.Second
		s := newStore(t, drv)
		w, proxy := workerBehindProxy(t, s, drv, framework.Config{
			Concurrency: 1, Lease: leaseLen, RenewEvery: time.Second, PollInterval: 100 * time.Millisecond,
		})
		var (
			mu      sync.Mutex
			sent    time.Time // the first claim statement's, by the worker
			settled = make(chan framework.Settlement, 4)
		)
		if err := w.Observe(framework.Observer{
			Claimed: func(ctx context.Context, c *leasework.Claim, info framework.ClaimInfo) context.Context {
				mu.Lock()
				defer mu.Unlock()
				if sent.IsZero() {
					sent = info.Sent
				}
				return ctx
			},
			Settled: func(_ context.Context, _ *leasework.Claim, s framework.Settlement) { settled <- s },
		}); err != nil {
			t.Fatal(err)
		}
		var runs runLog
		gate := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			runs.add(*c)
			if c.Reclaimed {
				return nil
			}
			<-gate // returns though its lease may be given up meanwhile
			return nil
		})
		row := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "once"})[0]
		start(t, w)
		waitFor(t, "the event's first run", func() bool { return runs.count() == 1 })

		proxy.Refuse()
		close(gate)
		st := recv(t, settled, "the first claim to settle while the database is away")
		abandonedAt := time.Now()
		if st.Outcome != framework.OutcomeAbandoned || !st.Rerun {
			t.Fatalf("first claim settled %+v; want abandoned, its event to run again", st)
		}
		mu.Lock()
		earliest := sent.Add(leaseLen * 9 / 10) // the first local deadline: no renewal was confirmed since
		mu.Unlock()
		if abandonedAt.Before(earliest) {
			t.Errorf("outcome abandoned %v before the claim's local deadline", earliest.Sub(abandonedAt).Round(time.Millisecond))
		}
		if c := w.Counters(); c.OutcomesAbandoned != 1 || c.RerunsFromAbandonedOutcomes != 1 || c.Completed != 0 {
			t.Fatalf("counters %+v; want 1 outcome abandoned and counted as a re-run, nothing completed", c)
		}

		// The row's lease expiry is a fixture, arranged before the worker
		// sees the database again.
		if err := leasetest.ExpireLease(context.Background(), s, row.ID); err != nil {
			t.Fatal(err)
		}
		proxy.Resume()
		if st := recv(t, settled, "the re-run to settle"); st.Outcome != framework.OutcomeCompleted {
			t.Fatalf("re-run settled %+v; want completed", st)
		}
		ran := runs.of("once")
		r, err := s.Get(context.Background(), row.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(ran) != 2 || !ran[1].Reclaimed || ran[1].Generation != ran[0].Generation+1 {
			t.Fatalf("runs %+v; want two, the second a reclaim at the next generation", ran)
		}
		if r.Status != leasework.StatusDone || r.Generation != ran[1].Generation {
			t.Errorf("row %s at generation %d; want DONE at the re-run's %d", r.Status, r.Generation, ran[1].Generation)
		}
		if c := w.Counters(); c.OutcomesAbandoned != 1 || c.RerunsFromAbandonedOutcomes != 1 || c.Completed != 1 || c.Reclaimed != 1 {
			t.Errorf("counters %+v; want 1 abandoned and re-run, 1 completed by the reclaim", c)
		}
	})
}

// While its outcome cannot be written but the database answers (every
// completion fails with a serialization failure), a finished claim's lease
// is renewed for as long as it takes, past a lease after its handler
// returned, and the outcome is written once the database takes it: DONE at
// the first generation, the handler run once. Meanwhile the worker claims
// no more than it holds at most, twice Concurrency.
func TestPendingOutcomeKeepsItsLeaseRenewed(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const concurrency, events = 2, 6
		// Renewed every second, a claim is lost only if the worker stalls
		// for 8s.
		const leaseLen = 10 * time.Second
		s := newStore(t, drv)
		ctx := context.Background()
		schema := ident(s.Schema())
		execSQL(t, s, `CREATE TABLE `+schema+`.refuse_completions (refuse boolean NOT NULL)`)
		execSQL(t, s, `INSERT INTO `+schema+`.refuse_completions VALUES (true)`)
		execSQL(t, s, `CREATE FUNCTION `+schema+`.refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF (SELECT refuse FROM `+schema+`.refuse_completions) THEN
					RAISE EXCEPTION 'completion refused for now' USING ERRCODE = '40001';
				END IF;
				RETURN NEW;
			END $$`)
		execSQL(t, s, `CREATE TRIGGER refuse_completion BEFORE UPDATE ON `+s.QualifiedTable()+` FOR EACH ROW
			WHEN (NEW.status = 'DONE') EXECUTE FUNCTION `+schema+`.refuse_completion()`)
		first := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "first"})[0]

		w := newWorker(t, s, framework.Config{
			Concurrency: concurrency, Lease: leaseLen, RenewEvery: time.Second, PollInterval: 50 * time.Millisecond,
		})
		var runs runLog
		returned := make(chan struct{}, events)
		register(t, w, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
			runs.add(*c)
			returned <- struct{}{}
			return nil
		})
		start(t, w)
		recv(t, returned, "the first handler to return")
		var ended time.Time // by the database clock, after the handler returned
		if err := s.DB().QueryRowContext(ctx, `SELECT now()`).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		var rest []lease.Event
		for i := range events - 1 {
			rest = append(rest, lease.Event{Kind: "k", EventID: fmt.Sprint("e", i)})
		}
		pgtest.Enqueue(t, s, rest...)

		// The claims held are the rows in progress at a generation whose
		// handler ran. A claim statement whose answer is lost (it timed
		// out on a loaded machine after the server committed it) leaves
		// its rows in progress, held by nobody until their leases expire:
		// those are not the worker's to count.
		mostHeld := 0
		waitFor(t, "the pending completion's lease to be renewed more than a lease after its handler returned (or the outcome abandoned)", func() bool {
			var until time.Time
			if err := s.DB().QueryRowContext(ctx, `SELECT lease_until FROM `+s.QualifiedTable()+` WHERE id = $1 AND status = 'INPROGRESS'`, first.ID).Scan(&until); err != nil {
				t.Fatal(err)
			}
			mostHeld = max(mostHeld, heldOf(t, s, &runs))
			return w.Counters().OutcomesAbandoned > 0 || until.After(ended.Add(2*leaseLen))
		})
		if mostHeld > 2*concurrency {
			t.Errorf("%d claims held at once while completions failed; want at most %d (twice Concurrency)", mostHeld, 2*concurrency)
		}
		if mostHeld < 2*concurrency {
			t.Errorf("at most %d claims held at once while completions failed; the sampling never saw the worker at its bound of %d", mostHeld, 2*concurrency)
		}
		execSQL(t, s, `UPDATE `+schema+`.refuse_completions SET refuse = false`)
		waitFor(t, "every outcome to be settled", func() bool {
			c := w.Counters()
			return c.Completed+c.OutcomesAbandoned+c.StaleRejections >= events
		})
		// A row is reclaimed only when the claim that took it failed (its
		// answer lost): it never ran under that claim.
		if c := w.Counters(); c.Completed != events || c.OutcomesAbandoned != 0 || c.StaleRejections != 0 || (c.Reclaimed != 0 && c.ClaimErrors == 0) || c.OutcomeWriteErrors == 0 {
			t.Fatalf("counters %+v; want %d completed after failed writes, none abandoned, rejected or reclaimed but from a failed claim", c, events)
		}
		for i := range events - 1 {
			if ran := runs.of(fmt.Sprint("e", i)); len(ran) != 1 {
				t.Errorf("event e%d ran %d times; want once", i, len(ran))
			}
		}
		r, err := s.Get(ctx, first.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ran := runs.of("first"); len(ran) != 1 || r.Status != leasework.StatusDone || r.Generation != ran[0].Generation {
			t.Errorf("first event: %s at generation %d after %d runs; want DONE at its first claim's generation, run once", r.Status, r.Generation, len(ran))
		}
	})
}

// A worker that stops while its outcomes cannot be written returns within
// GracePeriod + StopTimeout: the outcomes still pending when StopTimeout
// runs out are abandoned, counted as re-runs to come, and their rows are
// left to their leases.
func TestStopWithPendingOutcomesIsBounded(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const n = 5
		s := newStore(t, drv)
		cfg := framework.Config{
			Concurrency: n, Lease: 20 * time.Second, RenewEvery: 2 * time.Second,
			GracePeriod: 100 * time.Millisecond, StopTimeout: time.Second,
		}
		w, proxy := workerBehindProxy(t, s, drv, cfg)
		var runs runLog
		gate := make(chan struct{})
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			runs.add(*c)
			<-gate
			return nil
		})
		rows := pgtest.EnqueueN(t, s, n, "k")
		stop := start(t, w)
		waitFor(t, "every event's first run", func() bool { return runs.count() == n })
		proxy.Refuse()
		close(gate)
		waitFor(t, "an outcome write to fail", func() bool { return w.Counters().OutcomeWriteErrors > 0 })

		began := time.Now()
		stop()
		took := time.Since(began)
		// A liveness bound: the documented one, and room for a busy machine.
		if bound := cfg.GracePeriod + cfg.StopTimeout; took > bound+10*time.Second {
			t.Errorf("Run returned %v after its context ended with outcomes pending; its bound is %v", took, bound)
		}
		if c := w.Counters(); c.OutcomesAbandoned != n || c.RerunsFromAbandonedOutcomes != n || c.Completed != 0 {
			t.Errorf("counters %+v; want %d outcomes abandoned at the stop, each a re-run to come", c, n)
		}
		for _, e := range rows {
			r, err := s.Get(context.Background(), e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ran := runs.of(r.EventID); len(ran) != 1 || r.Status != leasework.StatusInProgress || r.Generation != ran[0].Generation {
				t.Errorf("event %s after the stop: %s at generation %d, %d runs; want INPROGRESS at its claim's generation, left to its lease", r.EventID, r.Status, r.Generation, len(ran))
			}
		}
	})
}
