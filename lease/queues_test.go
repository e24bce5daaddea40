package lease_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A claim reads one queue: events of other queues are neither claimed nor
// reclaimed, whatever their priority or age.
func TestClaimReadsItsQueueOnly(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "default-1"},
			lease.Event{Kind: "k", EventID: "mail-1", Queue: "mail"},
			lease.Event{Kind: "k", EventID: "mail-2", Queue: "mail", Priority: 3},
		)
		got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "mail"})
		if strings.Join(got, ",") != "mail-1,mail-2" {
			t.Errorf("claim of queue mail = %v; want mail-1, mail-2", got)
		}
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if strings.Join(got, ",") != "default-1" {
			t.Errorf("claim of the default queue = %v; want default-1", got)
		}
		// Expired leases stay in their queue too.
		if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+" SET lease_until = now() - interval '1 second' WHERE status = 'INPROGRESS'"); err != nil {
			t.Fatal(err)
		}
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "other"})
		if len(got) != 0 {
			t.Errorf("claim of an empty queue = %v; want nothing", got)
		}
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "mail"})
		if strings.Join(got, ",") != "mail-1,mail-2" {
			t.Errorf("reclaim of queue mail = %v; want mail-1, mail-2", got)
		}
	})
}

// Priority 0 is claimed before 1, and so on; within a level, due order;
// rows not yet due are skipped whatever their priority.
func TestClaimTakesPriorityOrder(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		later := time.Now().Add(time.Hour)
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "p9-a", Priority: 9},
			lease.Event{Kind: "k", EventID: "p2-a", Priority: 2},
			lease.Event{Kind: "k", EventID: "p0-later", Priority: 0, RunAt: later},
			lease.Event{Kind: "k", EventID: "p2-b", Priority: 2},
			lease.Event{Kind: "k", EventID: "p0-a", Priority: 0},
		)
		got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 3, Lease: time.Minute})
		if strings.Join(got, ",") != "p0-a,p2-a,p2-b" {
			t.Errorf("claim of 3 = %v; want p0-a, p2-a, p2-b", got)
		}
		got = claimEventIDs(t, s, lease.ClaimRequest{Limit: 3, Lease: time.Minute})
		if strings.Join(got, ",") != "p9-a" {
			t.Errorf("next claim = %v; want p9-a (p0-later is not due)", got)
		}
	})
}

// A paused queue gives nothing, expired leases included; resuming it wakes
// listening workers and its rows are claimed again. Other queues run on.
func TestPausedQueueGivesNothing(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "mail-1", Queue: "mail"},
			lease.Event{Kind: "k", EventID: "mail-2", Queue: "mail"},
			lease.Event{Kind: "k", EventID: "default-1"},
		)
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "mail"}); len(got) != 1 {
			t.Fatalf("claim = %v; want one", got)
		}
		if ran, err := s.PauseQueue(ctx, "mail"); err != nil || !ran {
			t.Fatalf("PauseQueue = %v, %v; want true (it ran)", ran, err)
		}
		if ran, err := s.PauseQueue(ctx, "mail"); err != nil || ran {
			t.Fatalf("pausing a paused queue = %v, %v; want false", ran, err)
		}
		if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+" SET lease_until = now() - interval '1 second' WHERE status = 'INPROGRESS'"); err != nil {
			t.Fatal(err)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "mail"}); len(got) != 0 {
			t.Errorf("claim of a paused queue = %v; want nothing", got)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); strings.Join(got, ",") != "default-1" {
			t.Errorf("claim of another queue while mail is paused = %v; want default-1", got)
		}
		qs, err := s.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 2 || qs[1].Name != "mail" || qs[1].Paused.IsZero() || qs[1].Ready != 1 || qs[1].InProgress != 1 ||
			qs[0].Name != "default" || !qs[0].Paused.IsZero() || qs[0].InProgress != 1 {
			t.Errorf("queues = %+v; want default running with 1 in progress, mail paused with 1 ready and 1 in progress", qs)
		}

		n, ok := drv.(leasework.Notifier)
		if !ok {
			t.Fatal("the driver cannot listen")
		}
		l, err := n.Listen(ctx, s.DB(), s.Channel())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if was, err := s.ResumeQueue(ctx, "mail"); err != nil || !was {
			t.Fatalf("ResumeQueue = %v, %v; want true (it was paused)", was, err)
		}
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if payload, err := l.Wait(wait); err != nil || payload != "" {
			t.Errorf("notification on resume = %q, %v; want an empty payload", payload, err)
		}
		if was, err := s.ResumeQueue(ctx, "mail"); err != nil || was {
			t.Errorf("resuming a running queue = %v, %v; want false", was, err)
		}
		if got := claimEventIDs(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "mail"}); len(got) != 2 {
			t.Errorf("claim after resume = %v; want both mail rows (one reclaimed)", got)
		}
	})
}

// Bad queue names and priorities are refused before anything is sent.
func TestQueueAndPriorityAreChecked(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	for _, e := range []lease.Event{
		{Kind: "k", Priority: -1},
		{Kind: "k", Priority: lease.MaxPriority + 1},
		{Kind: "k", Queue: strings.Repeat("q", lease.MaxQueueBytes+1)},
		{Kind: "k", Queue: "a\x00b"},
	} {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Enqueue(ctx, tx, e)
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), "event 0") {
			t.Errorf("enqueue of %+v: %v; want an error naming the event", e, err)
		}
	}
	if _, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "bad\xff"}); err == nil {
		t.Error("a claim of a queue that is not UTF-8 was accepted")
	}
	if _, err := s.PauseQueue(ctx, strings.Repeat("q", lease.MaxQueueBytes+1)); err == nil {
		t.Error("pausing a queue whose name is too long was accepted")
	}
}

// claimEventIDs claims req and returns the event ids claimed, sorted,
// checking their queue.
func claimEventIDs(t *testing.T, s *lease.Store, req lease.ClaimRequest) []string {
	t.Helper()
	claims, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range claims {
		ids = append(ids, c.EventID)
		if want := req.Queue; want != "" && c.Queue != want {
			t.Errorf("claim of queue %q returned %s of queue %q", want, c.EventID, c.Queue)
		}
	}
	sort.Strings(ids) // a claim returns its rows in no particular order
	return ids
}
