package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// effectsTable creates the business table of a test beside s's events
// table: one row per applied effect, with no unique key, so that an effect
// applied twice shows as two rows.
func effectsTable(t testing.TB, s *lease.Store) string {
	t.Helper()
	table := ident(s.Schema()) + ".effects"
	execSQL(t, s, "CREATE TABLE "+table+" (event_id text NOT NULL, generation bigint NOT NULL)")
	return table
}

// insertEffect is the business write of the tests' transactional handlers.
func insertEffect(ctx context.Context, tx *sql.Tx, table string, c *leasework.Claim) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (event_id, generation) VALUES ($1, $2)", c.EventID, c.Generation)
	return err
}

// effectCounts returns how many effects each event id has.
func effectCounts(t testing.TB, s *lease.Store, table string) map[string]int {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), "SELECT event_id, count(*) FROM "+table+" GROUP BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func registerTx(t testing.TB, w *framework.Worker, kind string, p framework.RetryPolicy, fn framework.TxFunc) {
	t.Helper()
	if err := w.Register(kind, framework.Transactional(fn), p); err != nil {
		t.Fatal(err)
	}
}

// A Transactional handler's business write and its completion commit
// together, through both drivers, whether the table keeps its DONE rows or
// deletes them at completion; the worker writes no second completion (no
// outcome is rejected or found already recorded).
func TestTransactionalCommitsEffectWithCompletion(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, retention := range []time.Duration{-1, 0} {
			t.Run(fmt.Sprintf("retention=%v", retention), func(t *testing.T) {
				s := newStore(t, drv)
				table := effectsTable(t, s)
				var events []lease.Event
				for i := range 8 {
					events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprint("e-", i)})
				}
				ids := pgtest.Enqueue(t, s, events...)
				cfg := framework.Config{Concurrency: 3, PollInterval: 20 * time.Millisecond}
				w, err := framework.New(s.DB(), s.Driver(), framework.Config{
					Schema: s.Schema(), Concurrency: cfg.Concurrency, PollInterval: cfg.PollInterval,
					Retention: retention, DeleteAtCompletion: retention == 0, Logger: testLogger(),
				})
				if err != nil {
					t.Fatal(err)
				}
				registerTx(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
					return insertEffect(ctx, tx, table, c)
				})
				stop := start(t, w)
				waitFor(t, "every event to complete", func() bool { return w.Counters().Completed == int64(len(events)) })
				stop()
				for _, e := range ids {
					r, err := s.Get(context.Background(), e.ID)
					switch {
					case retention == 0 && !errors.Is(err, lease.ErrNotFound):
						t.Errorf("row %d: Get = %+v, %v; want deleted at completion", e.ID, r, err)
					case retention != 0 && (err != nil || r.Status != leasework.StatusDone):
						t.Errorf("row %d: Get = %+v, %v; want DONE", e.ID, r, err)
					}
				}
				counts := effectCounts(t, s, table)
				for _, e := range events {
					if counts[e.EventID] != 1 {
						t.Errorf("event %s: %d effects; want exactly 1", e.EventID, counts[e.EventID])
					}
				}
				if c := w.Counters(); c.Completed != 8 || c.StaleRejections != 0 || c.OutcomesReplayed != 0 || c.Retried != 0 || c.LeasesLost != 0 {
					t.Errorf("counters %+v; want 8 completed and nothing else written", c)
				}
			})
		}
	})
}

// When the function returns an error or panics, its transaction is rolled
// back and the attempt is retried as any handler's: only the successful
// attempt's effect exists.
func TestTransactionalErrorAndPanicRollBack(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	table := effectsTable(t, s)
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "flaky"})[0].ID
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	registerTx(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		if err := insertEffect(ctx, tx, table, c); err != nil {
			return err
		}
		switch c.Attempt {
		case 1:
			return errors.New("the broker said no")
		case 2:
			panic("a bug after the write")
		case 3: // completes early, then fails: the completion goes too
			if err := framework.CompleteInTx(ctx, tx); err != nil {
				return err
			}
			return errors.New("failed after completing")
		}
		return nil
	})
	start(t, w)
	r := waitRow(t, s, id, "the event to complete", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	if r.Attempt != 4 {
		t.Errorf("row completed on attempt %d; want 4", r.Attempt)
	}
	waitFor(t, "the completion to be counted", func() bool { return w.Counters().Completed == 1 })
	if n := effectCounts(t, s, table)["flaky"]; n != 1 {
		t.Errorf("%d effects; want exactly 1, the fourth attempt's", n)
	}
	var gen int64
	if err := s.DB().QueryRow("SELECT generation FROM " + table).Scan(&gen); err != nil || gen != 4 {
		t.Errorf("the effect is generation %d's (%v); want the fourth attempt's", gen, err)
	}
	if c := w.Counters(); c.Retried != 3 || c.Panics != 1 || c.Completed != 1 || c.StaleRejections != 0 {
		t.Errorf("counters %+v; want 3 retries (one a panic), 1 completion", c)
	}
}

// A stale owner's completion, whether made after its function (late) or
// inside it with CompleteInTx (early), is rejected: its business write is
// rolled back, the attempt ends as lost and is counted as a stale
// rejection, and the worker writes nothing for the claim, which stays the
// rival's.
func TestTransactionalStaleOwnerIsRolledBack(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("early=%v", early), func(t *testing.T) {
			s := newStore(t, pgtest.Drivers[0].New())
			table := effectsTable(t, s)
			id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "taken-over"})[0].ID
			// One slot, held by the paused handler: the worker cannot claim
			// the expired row again itself.
			w := newWorker(t, s, framework.Config{Concurrency: 1, PollInterval: 20 * time.Millisecond, Lease: time.Minute})
			written, resume := make(chan struct{}), make(chan struct{})
			causes := make(chan error, 1)
			registerTx(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
				if err := insertEffect(ctx, tx, table, c); err != nil {
					return err
				}
				close(written)
				<-resume // paused past the lease while another worker took over
				var err error
				if early {
					err = framework.CompleteInTx(ctx, tx)
					if !errors.Is(err, leasework.ErrLeaseLost) {
						return fmt.Errorf("CompleteInTx = %v; want ErrLeaseLost", err)
					}
				}
				defer func() { causes <- context.Cause(ctx) }()
				return err
			})
			start(t, w)
			recv(t, written, "the handler's business write")
			if err := leasetest.ExpireLease(context.Background(), s, id); err != nil {
				t.Fatal(err)
			}
			rival, err := s.Claim(context.Background(), lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "rival"})
			if err != nil || len(rival) != 1 || rival[0].Generation != 2 {
				t.Fatalf("rival claim = %+v, %v; want generation 2", rival, err)
			}
			close(resume)
			if cause := recv(t, causes, "the handler's return"); early && !errors.Is(cause, leasework.ErrLeaseLost) {
				t.Errorf("the handler's context ended with %v; want ErrLeaseLost", cause)
			}
			waitFor(t, "the stale completion to be counted", func() bool { return w.Counters().StaleRejections == 1 })
			if n := effectCounts(t, s, table)["taken-over"]; n != 0 {
				t.Errorf("the stale owner's effect was committed (%d rows); want rolled back", n)
			}
			r, err := s.Get(context.Background(), id)
			if err != nil || r.Status != leasework.StatusInProgress || r.Generation != 2 || r.Worker != "rival" {
				t.Errorf("row = %+v, %v; want the rival's claim untouched", r, err)
			}
			if c := w.Counters(); c.StaleRejections != 1 || c.LeasesLost != 1 || c.Completed != 0 || c.Retried != 0 || c.Failed != 0 {
				t.Errorf("counters %+v; want 1 stale rejection (a lost lease), nothing written", c)
			}
		})
	}
}

// A Transactional handler's context ending mid-transaction (its attempt
// timeout) rolls the transaction back: the write is gone and the attempt is
// retried.
func TestTransactionalTimeoutRollsBack(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	table := effectsTable(t, s)
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "slow"})[0].ID
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond})
	registerTx(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		if err := insertEffect(ctx, tx, table, c); err != nil {
			return err
		}
		if c.Attempt == 1 {
			<-ctx.Done() // too slow: the attempt timeout ends it
			return context.Cause(ctx)
		}
		return nil
	})
	start(t, w)
	waitRow(t, s, id, "the event to complete", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	waitFor(t, "the completion to be counted", func() bool { return w.Counters().Completed == 1 })
	if n := effectCounts(t, s, table)["slow"]; n != 1 {
		t.Errorf("%d effects; want exactly 1, the second attempt's", n)
	}
	if c := w.Counters(); c.Retried != 1 || c.Completed != 1 {
		t.Errorf("counters %+v; want 1 retry, 1 completion", c)
	}
}

// Transactional refuses what cannot work: a nil function (Register fails)
// and CompleteInTx outside a Transactional handler or with another
// transaction.
func TestTransactionalMisuse(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	if err := w.Register("nil", framework.Transactional(nil), framework.RetryPolicy{}); err == nil {
		t.Error("Register of Transactional(nil) succeeded")
	}
	if err := framework.CompleteInTx(context.Background(), nil); !errors.Is(err, framework.ErrNoClaim) {
		t.Errorf("CompleteInTx outside a handler = %v; want ErrNoClaim", err)
	}
	plain, other := make(chan error, 1), make(chan error, 1)
	register(t, w, "plain", framework.RetryPolicy{}, func(ctx context.Context, _ *leasework.Claim) error {
		plain <- framework.CompleteInTx(ctx, nil)
		return nil
	})
	registerTx(t, w, "tx", framework.RetryPolicy{}, func(ctx context.Context, _ *sql.Tx, _ *leasework.Claim) error {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		other <- framework.CompleteInTx(ctx, tx)
		return nil
	})
	pgtest.Enqueue(t, s, lease.Event{Kind: "plain"}, lease.Event{Kind: "tx"})
	start(t, w)
	if err := recv(t, plain, "the plain handler"); err == nil || errors.Is(err, framework.ErrNoClaim) {
		t.Errorf("CompleteInTx in a plain handler = %v; want an error saying it is not a Transactional handler", err)
	}
	if err := recv(t, other, "the transactional handler"); err == nil {
		t.Error("CompleteInTx with another transaction succeeded")
	}
	waitFor(t, "both completions", func() bool { return w.Counters().Completed == 2 })
}
