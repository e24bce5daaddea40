package framework_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// journal records what an observer is told, per event id.
type journal struct {
	mu    sync.Mutex
	lines map[string][]string
}

type journalKey struct{}

func (j *journal) add(eventID, line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lines == nil {
		j.lines = map[string][]string{}
	}
	j.lines[eventID] = append(j.lines[eventID], line)
}

// addClaim records line under c's event id, and under its claim's own
// key (see ofClaim).
func (j *journal) addClaim(c *leasework.Claim, line string) {
	j.add(c.EventID, line)
	j.add(fmt.Sprintf("%s@%d", c.EventID, c.Generation), line)
}

// ofClaim is what the observer was told of one claim of an event: its
// order is promised. The order between two claims of one event is not:
// the next claim may be told before the outcome of the one before it.
func (j *journal) ofClaim(eventID string, generation int64) string {
	return j.of(fmt.Sprintf("%s@%d", eventID, generation))
}

func (j *journal) of(eventID string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines[eventID], " | ")
}

func (j *journal) observer() framework.Observer {
	return framework.Observer{
		Claimed: func(ctx context.Context, c *leasework.Claim, info framework.ClaimInfo) context.Context {
			if info.Queue != c.Queue || info.Sent.IsZero() || info.Returned.Before(info.Sent) || info.Wait < 0 ||
				(c.Reclaimed && info.Wait != 0) {
				j.addClaim(c, fmt.Sprintf("bad claim info %+v", info))
			}
			j.addClaim(c, fmt.Sprintf("claimed %d", c.Attempt))
			return context.WithValue(ctx, journalKey{}, c.EventID)
		},
		HandlerReturned: func(ctx context.Context, c *leasework.Claim, info framework.HandlerInfo) {
			line := fmt.Sprintf("returned err=%v", info.Err)
			if info.Cause != nil {
				line += fmt.Sprintf(" cause=%v", info.Cause)
			}
			if ctx.Value(journalKey{}) != c.EventID {
				line += " (not the Claimed context)"
			}
			j.addClaim(c, line)
		},
		Settled: func(ctx context.Context, c *leasework.Claim, s framework.Settlement) {
			line := s.Outcome.String()
			if s.Error != "" {
				line += " " + s.Error
			}
			if s.Cancelled {
				line += " (cancelled)"
			}
			if ctx.Value(journalKey{}) != c.EventID {
				line += " (not the Claimed context)"
			}
			j.addClaim(c, line)
		},
	}
}

// An observer is told of every claim, its handler's return and its
// outcome, in that order for each claim, with the context it returned
// from Claimed; the handler runs under that context too.
func TestObserverSeesEveryClaimAndOutcome(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
		var j journal
		if err := w.Observe(j.observer()); err != nil {
			t.Fatal(err)
		}
		if err := w.Observe(framework.Observer{}); err == nil {
			t.Error("Observe of an empty observer: no error")
		}
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
			func(ctx context.Context, c *leasework.Claim) error {
				if ctx.Value(journalKey{}) != c.EventID {
					return leasework.Permanent(errors.New("the handler's context is not the observer's"))
				}
				switch {
				case c.EventID == "fails":
					return leasework.Permanent(errors.New("no"))
				case c.EventID == "retries" && c.Attempt == 1:
					return errors.New("once")
				case c.EventID == "snoozes" && c.Attempt == 1:
					return leasework.Snooze(time.Millisecond)
				}
				return nil
			})
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "completes"},
			lease.Event{Kind: "k", EventID: "fails"},
			lease.Event{Kind: "k", EventID: "retries"},
			lease.Event{Kind: "k", EventID: "snoozes"},
		)
		stop := start(t, w)
		waitFor(t, "four events finished", func() bool { return w.Counters().Completed == 3 && w.Counters().Failed == 1 })
		stop()
		for _, want := range []struct {
			id     string
			claims []string // of generation 1, 2 …
		}{
			{"completes", []string{"claimed 1 | returned err=<nil> | completed"}},
			{"fails", []string{"claimed 1 | returned err=no | failed no"}},
			{"retries", []string{"claimed 1 | returned err=once | retried once", "claimed 2 | returned err=<nil> | completed"}},
			{"snoozes", []string{"claimed 1 | returned err=snoozed for 1ms | snoozed", "claimed 2 | returned err=<nil> | completed"}},
		} {
			for i, claim := range want.claims {
				if got := j.ofClaim(want.id, int64(i+1)); got != claim {
					t.Errorf("%s, generation %d:\n got  %s\n want %s", want.id, i+1, got, claim)
				}
			}
			// A claim comes after the handler of the claim before it
			// returned (its outcome, committed, made the row claimable);
			// its Settled may be told after the next claim's Claimed.
			all := j.of(want.id)
			if len(want.claims) == 2 && strings.Index(all, "claimed 2") < strings.Index(all, "returned err=") {
				t.Errorf("%s: %s; want claimed 2 after the first handler returned", want.id, all)
			}
			if n := strings.Count(all, " | ") + 1; n != 3*len(want.claims) {
				t.Errorf("%s: %s; want %d lines", want.id, all, 3*len(want.claims))
			}
		}
	})
}

// A cancel while the handler runs: the observer sees the handler's context
// end with ErrCancelled and the outcome rejected as cancelled. A lease
// that expired and was reclaimed: the stale outcome is rejected, and the
// reclaim is seen as such.
func TestObserverSeesLostLeases(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ctx := context.Background()
	// One slot, held by the blocked handler: this worker cannot reclaim the
	// expired row itself before the second worker does. The handler of the
	// reclaimed event holds its slot, after its context ends, until the
	// second worker has completed the event: without that, this worker's
	// slot frees as soon as its renewal is rejected, and it may reclaim the
	// row before the second worker has started.
	w := newWorker(t, s, framework.Config{RenewEvery: 50 * time.Millisecond, Concurrency: 1})
	var j journal
	if err := w.Observe(j.observer()); err != nil {
		t.Fatal(err)
	}
	running := make(chan int64, 1)
	reclaimed := make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		running <- c.ID
		<-ctx.Done()
		if c.EventID == "reclaimed" {
			<-reclaimed
		}
		return context.Cause(ctx)
	})
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "cancelled"})[0].ID
	start(t, w)
	recv(t, running, "the handler")
	if _, err := s.Cancel(ctx, id, "by the test"); err != nil {
		t.Fatal(err)
	}
	want := "claimed 1 | returned err=" + leasework.ErrCancelled.Error() + " cause=" + leasework.ErrCancelled.Error() + " | rejected (cancelled)"
	waitFor(t, "the cancelled attempt to settle", func() bool { return strings.Count(j.of("cancelled"), "|") == 2 })
	if got := j.of("cancelled"); got != want {
		t.Errorf("cancelled:\n got  %s\n want %s", got, want)
	}

	// A second worker reclaims an expired claim of the first.
	id = pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "reclaimed"})[0].ID
	recv(t, running, "the first claim")
	if err := leasetest.ExpireLease(ctx, s, id); err != nil {
		t.Fatal(err)
	}
	w2 := newWorker(t, s, framework.Config{})
	var j2 journal
	if err := w2.Observe(j2.observer()); err != nil {
		t.Fatal(err)
	}
	register(t, w2, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error { return nil })
	start(t, w2)
	waitFor(t, "the reclaim to complete", func() bool { return j2.of("reclaimed") == "claimed 2 | returned err=<nil> | completed" })
	close(reclaimed)
	waitFor(t, "the first claim to settle", func() bool { return strings.Count(j.of("reclaimed"), "|") == 2 })
	got := strings.Split(j.of("reclaimed"), " | ")
	if !slices.Equal([]string{got[0], got[2]}, []string{"claimed 1", "rejected"}) || !strings.Contains(got[1], "cause=") {
		t.Errorf("first claim of the reclaimed event: %s; want claimed 1, returned with a cause, rejected", j.of("reclaimed"))
	}
}

// An observer that panics is contained: the worker goes on and records
// every outcome. A handler returning a nil pointer as its error reaches the
// observer as an error that says so, safe to read.
func TestObserverPanicsAreContained(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{})
	var mu sync.Mutex
	var errs []string
	err := w.Observe(framework.Observer{
		Claimed: func(ctx context.Context, c *leasework.Claim, info framework.ClaimInfo) context.Context {
			panic("in Claimed")
		},
		HandlerReturned: func(ctx context.Context, c *leasework.Claim, info framework.HandlerInfo) {
			mu.Lock()
			errs = append(errs, fmt.Sprint(info.Err))
			mu.Unlock()
			panic("in HandlerReturned")
		},
		Settled: func(ctx context.Context, c *leasework.Claim, s framework.Settlement) { panic("in Settled") },
	})
	if err != nil {
		t.Fatal(err)
	}
	register(t, w, "k", framework.RetryPolicy{MaxAttempts: 1}, func(ctx context.Context, c *leasework.Claim) error {
		if c.EventID == "nil" {
			var e *nilErr
			return e
		}
		return nil
	})
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "ok"}, lease.Event{Kind: "k", EventID: "nil"})
	start(t, w)
	waitFor(t, "both events finished", func() bool { c := w.Counters(); return c.Completed == 1 && c.Failed == 1 })
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(errs)
	if len(errs) != 2 || errs[0] != "<nil>" || !strings.Contains(errs[1], "returned a nil *framework_test.nilErr") {
		t.Errorf("errors seen by the observer: %q; want one nil and one saying the handler returned a nil *nilErr", errs)
	}
}

// A HandlerReturned that never returns does not keep Run from returning: a
// claim whose observers are still busy at the stop is settled as
// abandoned later, off Run's goroutine. A Claimed that returns a context
// not derived from its own is ignored, so the handler still sees the stop.
func TestObserversCannotHoldTheWorker(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{GracePeriod: 100 * time.Millisecond, StopTimeout: 500 * time.Millisecond})
	block, settled := make(chan struct{}), make(chan framework.Outcome, 1)
	defer close(block)
	if err := w.Observe(framework.Observer{
		Claimed: func(ctx context.Context, c *leasework.Claim, info framework.ClaimInfo) context.Context {
			return context.Background() // wrong: not derived from ctx
		},
		HandlerReturned: func(ctx context.Context, c *leasework.Claim, info framework.HandlerInfo) { <-block },
		Settled:         func(ctx context.Context, c *leasework.Claim, s framework.Settlement) { settled <- s.Outcome },
	}); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
		close(running)
		<-ctx.Done() // the stop must reach it, whatever Claimed returned
		return context.Cause(ctx)
	})
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	recv(t, running, "the handler")
	cancel()
	if err := recv(t, done, "Run to return while HandlerReturned blocks"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	block <- struct{}{}
	if o := recv(t, settled, "the claim to settle"); o != framework.OutcomeAbandoned {
		t.Errorf("settled %v; want abandoned", o)
	}
}
