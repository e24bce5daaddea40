package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// lockRow opens a transaction that locks row id until the returned release
// is called (or the test ends), so that any write of the row waits.
func lockRow(t *testing.T, s *lease.Store, id int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := tx.QueryRowContext(ctx, `SELECT id FROM `+s.QualifiedTable()+` WHERE id = $1 FOR UPDATE`, id).Scan(&got); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
				t.Error(err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

// waitLockWaiter waits until a statement on s's table waits for a row lock.
func waitLockWaiter(t *testing.T, s *lease.Store) {
	t.Helper()
	waitFor(t, "a write to wait for the row lock", func() bool {
		var n int
		err := s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, s.QualifiedTable()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// One value the database refuses does not hold back the outcomes written
// in the same batch: a trigger makes every outcome write of one event fail,
// and the completions and retries batched with it are recorded all the
// same; the poisoned one is tried alone a few times, then abandoned.
func TestPoisonedOutcomeDoesNotHoldBackItsBatch(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		schema := ident(s.Schema())
		execSQL(t, s, `CREATE FUNCTION `+schema+`.poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'poisoned event %', NEW.event_id; END $$`)
		execSQL(t, s, `CREATE TRIGGER poison BEFORE UPDATE ON `+s.QualifiedTable()+` FOR EACH ROW
			WHEN (NEW.event_id = 'poison' AND NEW.status <> 'INPROGRESS') EXECUTE FUNCTION `+schema+`.poison()`)

		const n = 20
		events := []lease.Event{{Kind: "done", EventID: "gate"}, {Kind: "done", EventID: "poison"}}
		for i := range n {
			events = append(events, lease.Event{Kind: "done", EventID: fmt.Sprint("done-", i)},
				lease.Event{Kind: "retry", EventID: fmt.Sprint("retry-", i)})
		}
		rows := pgtest.Enqueue(t, s, events...)
		gateID := rows[0].ID

		// Renewals (every 30s here) never compete for the gate's lock.
		w := newWorker(t, s, framework.Config{Concurrency: 2*n + 2, Lease: 2 * time.Minute, RenewEvery: time.Minute})
		started := make(chan string, len(events))
		gate, all := make(chan struct{}), make(chan struct{})
		register(t, w, "done", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
			started <- c.EventID
			if c.EventID == "gate" {
				<-gate
			} else {
				<-all
			}
			return nil
		})
		register(t, w, "retry", framework.RetryPolicy{InitialInterval: time.Hour}, func(_ context.Context, c *leasework.Claim) error {
			started <- c.EventID
			<-all
			return errors.New("try later")
		})
		start(t, w)
		for range events {
			recv(t, started, "every handler to start")
		}
		// The gate's completion waits for a row lock, and the other
		// outcomes gather behind it: the next batches hold the poisoned
		// completion with 20 others, and 20 retries.
		release := lockRow(t, s, gateID)
		close(gate)
		waitLockWaiter(t, s)
		close(all)
		waitFor(t, "every other outcome to be queued", func() bool { return framework.QueuedOutcomes(w) == len(events)-1 })
		release()

		waitFor(t, "every outcome settled", func() bool {
			c := w.Counters()
			return c.Completed+c.Retried+c.OutcomesAbandoned == int64(len(events))
		})
		if c := w.Counters(); c.Completed != n+1 || c.Retried != n || c.OutcomesAbandoned != 1 || c.StaleRejections != 0 {
			t.Errorf("counters %+v; want %d completed, %d retried, 1 abandoned", c, n+1, n)
		}
		for _, e := range rows {
			r, err := s.Get(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case r.EventID == "poison":
				if r.Status != leasework.StatusInProgress || r.Generation != 1 {
					t.Errorf("poisoned row: %s generation %d; want INPROGRESS at 1, left to expire", r.Status, r.Generation)
				}
			case strings.HasPrefix(r.EventID, "retry-"):
				if r.Status != leasework.StatusReady || r.LastError != "try later" || r.Attempt != 1 {
					t.Errorf("row %s: %s attempt %d error %q; want READY after attempt 1 with its error", r.EventID, r.Status, r.Attempt, r.LastError)
				}
			default:
				if r.Status != leasework.StatusDone {
					t.Errorf("row %s: %s; want DONE", r.EventID, r.Status)
				}
			}
		}
	})
}

// No handler waits behind a stuck outcome write, and neither does the claim
// loop, up to its bound of claims held (twice Concurrency): while a
// completion waits for a row lock, events enqueued behind it are claimed
// and handled, and every outcome is written once the lock goes.
func TestStuckOutcomeWriteBlocksNoHandler(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	gateID := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "gate"})[0].ID
	// A long lease makes a long statement timeout (RenewEvery, capped at
	// 30s): the gate's completion stays stuck for all of this test.
	const concurrency = 10
	w := newWorker(t, s, framework.Config{Concurrency: concurrency, Lease: 2 * time.Minute, RenewEvery: time.Minute, PollInterval: 20 * time.Millisecond})
	handled := make(chan string, 100)
	gate := make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
		if c.EventID == "gate" {
			<-gate
		}
		handled <- c.EventID
		return nil
	})
	start(t, w)
	waitFor(t, "the gate's claim", func() bool { return w.Counters().Claimed == 1 })
	release := lockRow(t, s, gateID)
	close(gate)
	recv(t, handled, "the gate's handler")
	waitLockWaiter(t, s)

	const n = 2*concurrency - 1 // with the gate's, as many claims as the worker holds
	var events []lease.Event
	for i := range n {
		events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprint("e", i)})
	}
	pgtest.Enqueue(t, s, events...)
	for range n {
		recv(t, handled, "the handlers of events enqueued behind a stuck write")
	}
	release()
	waitFor(t, "every completion", func() bool { return w.Counters().Completed == n+1 })
}

// A completion whose statement commits after the worker's statement timeout
// (its reply lost) is found already recorded by the next try, and counted as
// a completion, not as a stale rejection. Through both drivers, with DONE
// rows kept (the next try finds the row DONE) and deleted at completion (the
// next try finds it gone).
func TestCompletionCommittedAfterTimeoutIsCountedOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, keep := range []bool{true, false} {
			name := "kept"
			if !keep {
				name = "deleted"
			}
			t.Run(name, func(t *testing.T) {
				s := newStore(t, drv)
				schema := ident(s.Schema())
				// Past the worker's statement timeout (1s here) whatever
				// the driver does on a timeout: a cancel request is trapped.
				execSQL(t, s, `CREATE FUNCTION `+schema+`.slow() RETURNS trigger LANGUAGE plpgsql AS $$
					DECLARE t0 timestamptz := clock_timestamp();
					BEGIN
						WHILE clock_timestamp() < t0 + interval '1500 milliseconds' LOOP
							BEGIN
								PERFORM pg_sleep(0.05);
							EXCEPTION WHEN query_canceled THEN
								NULL;
							END;
						END LOOP;
						IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
						RETURN NEW;
					END $$`)
				if keep {
					execSQL(t, s, `CREATE TRIGGER slow BEFORE UPDATE ON `+s.QualifiedTable()+` FOR EACH ROW
						WHEN (NEW.status = 'DONE') EXECUTE FUNCTION `+schema+`.slow()`)
				} else {
					execSQL(t, s, `CREATE TRIGGER slow BEFORE DELETE ON `+s.QualifiedTable()+` FOR EACH ROW
						EXECUTE FUNCTION `+schema+`.slow()`)
				}
				id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
				cfg := framework.Config{Schema: s.Schema(), Table: s.Table(), RenewEvery: 100 * time.Millisecond, Logger: testLogger()}
				if keep {
					cfg.Retention = -1
				} else {
					cfg.DeleteAtCompletion = true
				}
				w, err := framework.New(s.DB(), s.Driver(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
				start(t, w)
				waitFor(t, "the completion to be settled", func() bool {
					c := w.Counters()
					return c.Completed+c.StaleRejections+c.OutcomesAbandoned > 0
				})
				if c := w.Counters(); c.Completed != 1 || c.StaleRejections != 0 || c.OutcomesReplayed != 1 {
					t.Errorf("counters %+v; want 1 completed, found already recorded, no stale rejection", c)
				}
				r, err := s.Get(context.Background(), id)
				switch {
				case keep && (err != nil || r.Status != leasework.StatusDone):
					t.Errorf("row = %+v, %v; want DONE", r, err)
				case !keep && !errors.Is(err, lease.ErrNotFound):
					t.Errorf("row = %+v, %v; want deleted", r, err)
				}
			})
		}
	})
}
