package framework_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// wakePoll is the poll interval of the tests below: far longer than any of
// their waits, so that a row they see handled was claimed because the
// worker woke for it, never because it polled.
const wakePoll = 24 * time.Hour

// A retry runs when its delay ends, not at the worker's next poll: nothing
// notifies a retry coming due, so the worker that wrote it wakes for it.
func TestRetryRunsWhenItsDelayEndsNotAtThePoll(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: wakePoll})
		retryOnce(t, s, w, "the retry, due 100ms after the first attempt, to complete (the next poll is a day away)")
	})
}

// A retry runs when its delay ends even when writing it takes longer than
// the delay: the worker wakes for it once the write commits. It used to arm
// the wake when it decided on the retry, and under load the wake came
// while the row was still in progress; the worker then slept until the
// row's lease ran out (an hour here) or the next poll.
func TestRetryRunsWhenItsDelayEndsAfterASlowWrite(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		execSQL(t, s, `CREATE FUNCTION `+ident(s.Schema())+`.slow_retry() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				PERFORM pg_sleep(0.5);
				RETURN NEW;
			END $$`)
		execSQL(t, s, `CREATE TRIGGER slow_retry BEFORE UPDATE ON `+s.QualifiedTable()+` FOR EACH ROW
			WHEN (OLD.status = 'INPROGRESS' AND NEW.status = 'READY') EXECUTE FUNCTION `+ident(s.Schema())+`.slow_retry()`)
		w := newWorker(t, s, framework.Config{PollInterval: wakePoll, Lease: time.Hour})
		retryOnce(t, s, w, "the retry, due 100ms after its 500ms write, to complete (the lease and the next poll are an hour and a day away)")
	})
}

// retryOnce runs on w one event whose first attempt fails with a retry due
// 100ms later, and checks that the retry completes it, waiting for what.
func retryOnce(t *testing.T, s *lease.Store, w *framework.Worker, what string) {
	t.Helper()
	var calls atomic.Int32
	register(t, w, "k", framework.RetryPolicy{InitialInterval: 100 * time.Millisecond, RandomizationFactor: -1},
		func(context.Context, *leasework.Claim) error {
			if calls.Add(1) == 1 {
				return errors.New("once")
			}
			return nil
		})
	start(t, w)
	waitListening(t, w)
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
	r := waitRow(t, s, id, what, func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	if r.Attempt != 2 || calls.Load() != 2 {
		t.Errorf("DONE after attempt %d, %d handler calls; want 2 and 2", r.Attempt, calls.Load())
	}
}

// An event enqueued to run later runs when it comes due: its insert wakes
// the worker, which finds nothing due yet, reads when the earliest row
// comes due (lease.Store.NextWake), and claims then.
func TestEventRunAtLaterRunsWhenDueNotAtThePoll(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: wakePoll})
		handled := make(chan string, 1)
		register(t, w, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
			handled <- c.EventID
			return nil
		})
		start(t, w)
		waitListening(t, w)
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "later", RunAt: time.Now().Add(300 * time.Millisecond)})
		if got := recv(t, handled, "the event enqueued to run 300ms later (the next poll is a day away)"); got != "later" {
			t.Errorf("handled %q; want later", got)
		}
	})
}

// waitListening waits until w has made its claim on start and the one it
// makes once it listens: from then on, with nothing to do, only a
// notification or a wake of its own makes it claim before its poll.
func waitListening(t *testing.T, w *framework.Worker) {
	t.Helper()
	waitFor(t, "the worker's claims on start and on listening", func() bool { return w.Counters().ClaimQueries >= 2 })
}
