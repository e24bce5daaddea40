package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

type reservation struct {
	SKU string
	N   int
}

// A handler of steps resumes after its last finished one: a step recorded
// by an attempt that then failed is returned, decoded, to the next attempt
// without running again; the step that failed runs again; the output is
// kept with the row, and the row lists both steps with the generation of
// the attempt that recorded each.
func TestStepsResumeAfterAFailure(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "order"})
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		var reserves, charges atomic.Int32
		got := make(chan reservation, 2)
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, c *leasework.Claim) error {
			r, err := framework.Step(ctx, "reserve", func(ctx context.Context) (reservation, error) {
				return reservation{SKU: "sku-" + c.EventID, N: int(reserves.Add(1))}, nil
			})
			if err != nil {
				return leasework.Permanent(err)
			}
			// Within an attempt, the same name answers the first result.
			again, err := framework.Step(ctx, "reserve", func(ctx context.Context) (reservation, error) {
				return reservation{}, errors.New("reserve ran twice in one attempt")
			})
			if err != nil || again != r {
				return leasework.Permanent(errors.New("a second call of a recorded step did not answer its result"))
			}
			got <- r
			_, err = framework.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				if charges.Add(1) == 1 {
					return "", errors.New("card declined, try again")
				}
				return "ch_1", nil
			})
			if err != nil {
				return err
			}
			return framework.RecordOutput(ctx, []byte("shipped "+r.SKU))
		})
		start(t, w)
		first, second := recv(t, got, "the first attempt's reservation"), recv(t, got, "the second attempt's reservation")
		if first != (reservation{"sku-order", 1}) || second != first {
			t.Errorf("reservations seen: %+v then %+v; want the first one twice", first, second)
		}
		row := waitRow(t, s, ids[0].ID, "the event DONE", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		if reserves.Load() != 1 || charges.Load() != 2 {
			t.Errorf("reserve ran %d times, charge %d; want 1 and 2", reserves.Load(), charges.Load())
		}
		if string(row.Output) != "shipped sku-order" || len(row.Steps) != 2 {
			t.Fatalf("row's output %q, steps %+v; want the output and two steps", row.Output, row.Steps)
		}
		gens := map[string]int64{}
		for _, st := range row.Steps {
			gens[st.Name] = st.Generation
		}
		if gens["reserve"] != 1 || gens["charge"] != 2 {
			t.Errorf("steps recorded by generations %v; want reserve by 1, charge by 2", gens)
		}
	})
}

// A step recorded in the transaction of its effects commits with them: an
// attempt that commits its step and then crashes is followed by one that
// does not run the step again, so the effect is made once; a step whose
// transaction rolls back is not recorded, and runs again.
func TestStepTxCommitsTheStepWithItsEffects(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		effects := pgtest.SchemaName()
		if _, err := s.DB().ExecContext(ctx, `CREATE TABLE `+effects+` (step text, attempt int)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DB().Exec(`DROP TABLE ` + effects) })
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, c *leasework.Claim) error {
			for _, name := range []string{"debit", "credit"} {
				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				_, err = framework.StepTx(ctx, tx, name, func(ctx context.Context, tx *sql.Tx) (int, error) {
					_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` VALUES ($1, $2)`, name, c.Attempt)
					return c.Attempt, err
				})
				if err != nil {
					tx.Rollback()
					return err
				}
				// Attempt 1 commits debit, then rolls credit back and
				// fails; attempt 2 commits credit.
				if name == "credit" && c.Attempt == 1 {
					tx.Rollback()
					return errors.New("crashed before credit committed")
				}
				if err := tx.Commit(); err != nil {
					return err
				}
			}
			return nil
		})
		start(t, w)
		waitRow(t, s, ids[0].ID, "the event DONE", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		rows, err := s.DB().QueryContext(ctx, `SELECT step || ':' || attempt FROM `+effects+` ORDER BY step`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var e string
			if err := rows.Scan(&e); err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
		}
		rows.Close()
		if strings.Join(got, ",") != "credit:2,debit:1" {
			t.Errorf("effects %q; want debit once by attempt 1, credit once by attempt 2", got)
		}
	})
}

// A paused owner whose claim was taken over cannot record a step: the
// record is rejected as lost, the handler's context is cancelled with that
// cause, and the row holds no step from it.
func TestStaleOwnersStepIsRejected(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ctx := context.Background()
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	w := newWorker(t, s, framework.Config{})
	running, taken := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	register(t, w, "k", framework.RetryPolicy{}, func(hctx context.Context, c *leasework.Claim) error {
		close(running)
		<-taken
		_, err := framework.Step(hctx, "late", func(context.Context) (int, error) { return 1, nil })
		errs <- err
		errs <- context.Cause(hctx)
		return err
	})
	start(t, w)
	recv(t, running, "the handler running")
	if _, err := leasetest.NewerGeneration(ctx, s, ids[0].ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	close(taken)
	if err := recv(t, errs, "the late step's error"); !errors.Is(err, leasework.ErrLeaseLost) {
		t.Errorf("a stale owner's step: %v; want ErrLeaseLost", err)
	}
	if cause := recv(t, errs, "the handler's context's cause"); !errors.Is(cause, leasework.ErrLeaseLost) {
		t.Errorf("the handler's context after the rejected step: cause %v; want ErrLeaseLost", cause)
	}
	row, err := s.Get(ctx, ids[0].ID)
	if err != nil || row.Steps != nil {
		t.Errorf("row after the stale step: steps %+v, %v; want none", row.Steps, err)
	}
}

// Bad input is refused before the step runs, or before anything is
// written: a bad name, a result too large, an output too large, a nil tx,
// a context that is not a handler's.
func TestStepInputIsChecked(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	w := newWorker(t, s, framework.Config{})
	type check struct {
		what string
		err  error
		ran  bool
	}
	out := make(chan []check, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		var cs []check
		ran := false
		_, err := framework.Step(ctx, "", func(context.Context) (int, error) { ran = true; return 0, nil })
		cs = append(cs, check{"an empty name", err, ran})
		ran = false
		_, err = framework.Step(ctx, "big", func(context.Context) (string, error) {
			ran = true
			return strings.Repeat("x", framework.MaxStepSize), nil
		})
		cs = append(cs, check{"a result too large", err, !ran})
		_, err = framework.StepTx(ctx, nil, "nil tx", func(context.Context, *sql.Tx) (int, error) { return 0, nil })
		cs = append(cs, check{"a nil tx", err, false})
		cs = append(cs, check{"an output too large", framework.RecordOutput(ctx, make([]byte, framework.MaxOutputSize+1)), false})
		_, err = framework.Step(context.Background(), "x", func(context.Context) (int, error) { return 0, nil })
		cs = append(cs, check{"no handler's context", err, false})
		out <- cs
		return nil
	})
	start(t, w)
	cs := recv(t, out, "the checks")
	if !leasework.IsPermanent(cs[1].err) {
		t.Errorf("a result too large: %v; want a permanent error, which fails the event rather than run the step again", cs[1].err)
	}
	want := []any{"name is empty", framework.ErrStepTooLarge, "tx is nil", framework.ErrOutputTooLarge, framework.ErrNoClaim}
	for i, c := range cs {
		switch wv := want[i].(type) {
		case string:
			if c.err == nil || !strings.Contains(c.err.Error(), wv) {
				t.Errorf("%s: %v; want an error containing %q", c.what, c.err, wv)
			}
		case error:
			if !errors.Is(c.err, wv) {
				t.Errorf("%s: %v; want %v", c.what, c.err, wv)
			}
		}
		if c.ran {
			t.Errorf("%s: the step's function ran (or did not run when it should have)", c.what)
		}
	}
}

// A step recorded by an attempt whose worker is then killed (SIGKILL) is
// returned, not run again, by the next attempt, in another process, once
// the dead worker's lease has ended; that attempt runs the steps after it.
func TestStepSurvivesSIGKILL(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ctx := context.Background()
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	c := startChild(t, "step", s)
	var gotID, gen int64
	var recorded string
	line := c.expect(t, "stepped ")
	if _, err := fmt.Sscan(line, &gotID, &gen); err != nil {
		t.Fatal(err)
	}
	recorded = strings.SplitN(line, " ", 3)[2]
	if gotID != id || gen != 1 {
		t.Fatalf("the child stepped row %d generation %d; want row %d generation 1", gotID, gen, id)
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	waitChildSessionsGone(t, s)
	if err := leasetest.ExpireLease(ctx, s, id); err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	var reran atomic.Int32
	got := make(chan string, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		r, err := framework.Step(ctx, "reserve", func(context.Context) (string, error) {
			reran.Add(1)
			return "reserved again", nil
		})
		if err != nil {
			return leasework.Permanent(err)
		}
		if _, err := framework.Step(ctx, "charge", func(context.Context) (string, error) { return "charged", nil }); err != nil {
			return leasework.Permanent(err)
		}
		got <- r
		return nil
	})
	start(t, w)
	if r := recv(t, got, "the second attempt's reservation"); r != recorded || reran.Load() != 0 {
		t.Errorf("second attempt got %q and ran reserve %d times; want %q, recorded by the killed worker, and no run", r, reran.Load(), recorded)
	}
	row := waitRow(t, s, id, "the event DONE", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	if len(row.Steps) != 2 || row.Steps[0].Name != "reserve" || row.Steps[0].Generation != 1 || row.Steps[1].Generation != 2 {
		t.Errorf("row's steps %+v; want reserve by generation 1, then charge by 2", row.Steps)
	}
}
