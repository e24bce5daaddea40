package framework_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Each queue has its own slots: a queue whose one slot is held by a
// handler that does not return leaves the other queue's events to run,
// and a queue the worker does not serve is never claimed.
func TestQueuesHaveTheirOwnSlots(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		w := newWorker(t, s, framework.Config{
			Queues:       []framework.Queue{{Name: "slow", Concurrency: 1}, {Name: "fast", Concurrency: 1}},
			PollInterval: 20 * time.Millisecond,
		})
		release := make(chan struct{})
		handled := make(chan string, 10)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			handled <- c.Queue + "/" + c.EventID
			if c.Queue == "slow" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "s1", Queue: "slow"},
			lease.Event{Kind: "k", EventID: "s2", Queue: "slow"},
			lease.Event{Kind: "k", EventID: "f1", Queue: "fast"},
			lease.Event{Kind: "k", EventID: "f2", Queue: "fast"},
			lease.Event{Kind: "k", EventID: "other", Queue: "unserved"},
		)
		stop := start(t, w)
		got := map[string]bool{}
		for len(got) < 3 {
			select {
			case h := <-handled:
				got[h] = true
			case <-time.After(waitTimeout):
				t.Fatalf("handled %v; want one slow event and both fast ones while the slow one holds its queue's slot", got)
			}
		}
		if !got["fast/f1"] || !got["fast/f2"] {
			t.Fatalf("handled %v; want both fast events while the slow queue's slot is held", got)
		}
		close(release)
		for len(got) < 4 {
			select {
			case h := <-handled:
				got[h] = true
			case <-time.After(waitTimeout):
				t.Fatalf("handled %v; want the second slow event once the first returned", got)
			}
		}
		stop()
		r, err := s.GetByEventID(context.Background(), "other")
		if err != nil || r.Status != leasework.StatusReady || r.Generation != 0 {
			t.Errorf("the event of an unserved queue: %+v, %v; want READY, never claimed", r, err)
		}
	})
}

// A paused queue is not claimed from, running handlers finish, and a
// resumed queue's events run at once: resuming wakes the worker, whose
// next poll is far away.
func TestPausedQueueWaitsForResume(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{Queues: []framework.Queue{{Name: "q"}}, PollInterval: time.Hour})
		handled := make(chan string, 10)
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			handled <- c.EventID
			return nil
		})
		if _, err := s.PauseQueue(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		type claimed struct {
			n   int
			err error
		}
		returned := make(chan claimed, 100)
		framework.OnClaimReturned(w, func(queue string, n int, err error) { returned <- claimed{n, err} })
		stop := start(t, w)
		<-framework.Listening(w)
		// Every claim sent before the enqueue has returned.
		var back int64
		waitFor(t, "the claims before the enqueue to return", func() bool {
			for len(returned) > 0 {
				<-returned
				back++
			}
			return back > 0 && back == w.Counters().ClaimQueries
		})
		id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e1", Queue: "q"})[0].ID
		// The notification wakes the worker; its claim, once it has
		// returned, has found the queue paused and taken nothing.
		if c := recv(t, returned, "a claim of the paused queue"); c.n != 0 || c.err != nil {
			t.Fatalf("claim of the paused queue: %d rows, %v; want none", c.n, c.err)
		}
		if r, err := s.Get(ctx, id); err != nil || r.Status != leasework.StatusReady || r.Generation != 0 {
			t.Fatalf("the paused queue's event: %+v, %v; want READY, never claimed", r, err)
		}
		select {
		case id := <-handled:
			t.Fatalf("handled %s from a paused queue", id)
		default:
		}
		if was, err := s.ResumeQueue(ctx, "q"); err != nil || !was {
			t.Fatalf("ResumeQueue = %v, %v", was, err)
		}
		select {
		case id := <-handled:
			if id != "e1" {
				t.Fatalf("handled %s; want e1", id)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the resumed queue's event was not handled; resuming must wake the worker")
		}
		stop()
	})
}

// Config.Queues is checked: names valid and distinct, concurrency in range.
func TestQueuesConfigIsChecked(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	for _, c := range []struct {
		queues []framework.Queue
		want   string
	}{
		{[]framework.Queue{{Name: ""}}, "Queues[0].Name"},
		{[]framework.Queue{{Name: "a"}, {Name: "a"}}, "Queues[1].Name"},
		{[]framework.Queue{{Name: "a", Concurrency: -1}}, "Queues[0].Concurrency"},
		{[]framework.Queue{{Name: "a", Concurrency: framework.MaxConcurrency + 1}}, "Queues[0].Concurrency"},
		{[]framework.Queue{{Name: strings.Repeat("q", lease.MaxQueueBytes+1)}}, "Queues[0].Name"},
	} {
		_, err := framework.New(s.DB(), s.Driver(), framework.Config{Schema: s.Schema(), Queues: c.queues})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with Queues %+v: %v; want an error naming %s", c.queues, err, c.want)
		}
	}
}
