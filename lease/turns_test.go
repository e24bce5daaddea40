package lease_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// completeTakingTurns completes claims through WriteManyTakingTurns with
// req, failing the test unless every completion is accepted.
func completeTakingTurns(t *testing.T, s *lease.Store, req lease.ClaimRequest, op func(leasework.Ref) lease.Write,
	claims ...leasework.Claim) []leasework.Claim {
	t.Helper()
	writes := make([]lease.Write, len(claims))
	for i, c := range claims {
		writes[i] = op(c.Ref())
	}
	res, took, err := s.WriteManyTakingTurns(context.Background(), req, writes...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Verdict != lease.VerdictAccepted {
			t.Fatalf("completion of row %d: %v, %v", r.Ref.ID, r.Verdict, r.Err)
		}
	}
	return took
}

// TestCompletionsTakeTurnsInKeyOrder: a worker that takes the turns its
// completions pass on runs each key's events one at a time, in order, with
// no claim statement after the heads': every completion claims the key's
// next event for it, INPROGRESS under its lease at the next generation,
// while the events behind stay WAITING. Through both completion
// statements (rows kept DONE, rows deleted).
func TestCompletionsTakeTurnsInKeyOrder(t *testing.T) {
	for _, op := range []struct {
		name  string
		write func(leasework.Ref) lease.Write
	}{{"complete", lease.Complete}, {"complete and delete", lease.CompleteAndDelete}} {
		t.Run(op.name, func(t *testing.T) {
			const keys, perKey = 5, 4
			s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
			ctx := context.Background()
			order := map[string][]int64{} // each key's rows, in commit order
			for n := range perKey {
				events := make([]lease.Event, keys)
				for k := range events {
					events[k] = lease.Event{Kind: "k", Key: fmt.Sprintf("key-%d", k), Payload: []byte(fmt.Sprint(n))}
				}
				for _, e := range pgtest.Enqueue(t, s, events...) {
					row, err := s.Get(ctx, e.ID)
					if err != nil {
						t.Fatal(err)
					}
					order[row.Key] = append(order[row.Key], row.ID)
				}
			}
			req := lease.ClaimRequest{Limit: 100, Lease: time.Hour, Worker: "w"}
			claims, err := s.Claim(ctx, req)
			if err != nil || len(claims) != keys {
				t.Fatalf("claim: %d claims, %v; want one head per key, %d", len(claims), err, keys)
			}
			ran := map[string][]int64{}
			for round := 0; len(claims) > 0; round++ {
				for _, c := range claims {
					ran[c.Key] = append(ran[c.Key], c.ID)
					row, err := s.Get(ctx, c.ID)
					if err != nil {
						t.Fatal(err)
					}
					if row.Status != leasework.StatusInProgress || row.Generation != c.Generation || row.Worker != "w" ||
						!row.LeaseUntil.Equal(c.LeaseUntil) {
						t.Fatalf("round %d: claim of row %d at generation %d, owner w, lease %v: the row is %s at generation %d, owner %q, lease %v",
							round, c.ID, c.Generation, c.LeaseUntil, row.Status, row.Generation, row.Worker, row.LeaseUntil)
					}
				}
				claims = completeTakingTurns(t, s, req, op.write, claims...)
				if round < perKey-1 && len(claims) != keys {
					t.Fatalf("round %d: the completions took %d turns; want one per key, %d", round, len(claims), keys)
				}
				if more, err := s.Claim(ctx, req); err != nil || len(more) != 0 {
					t.Fatalf("round %d: a claim took %d rows (%v); every next event was taken by the completions", round, len(more), err)
				}
			}
			for k, ids := range order {
				if !slices.Equal(ran[k], ids) {
					t.Errorf("key %s ran %v; want its commit order %v", k, ran[k], ids)
				}
			}
		})
	}
}

// TestCompletionsTakeOnlyTurnsAClaimWouldTake: a completion takes a key's
// next event only where the claim it was given could take it now, and at
// most Limit of them; every other next event becomes READY, as without
// turns, and is claimed by a claim.
func TestCompletionsTakeOnlyTurnsAClaimWouldTake(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	if _, err := s.PauseQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	// Each key: a head, then the next event, which a claim of the default
	// queue for kind k may or may not take.
	next := map[string]lease.Event{
		"taken-1":      {Kind: "k"},
		"taken-2":      {Kind: "k"},
		"over-limit":   {Kind: "k", Priority: 5},
		"other-kind":   {Kind: "other"},
		"other-queue":  {Kind: "k", Queue: "elsewhere"},
		"paused-queue": {Kind: "k", Queue: "paused"},
		"not-due":      {Kind: "k", RunAt: later},
	}
	var heads []lease.Event
	var followers []lease.Event
	for key, e := range next {
		heads = append(heads, lease.Event{Kind: "k", Key: key})
		e.Key = key
		followers = append(followers, e)
	}
	pgtest.Enqueue(t, s, heads...)
	pgtest.Enqueue(t, s, followers...)
	req := lease.ClaimRequest{Limit: 100, Lease: time.Hour, Kinds: []string{"k"}}
	claims, err := s.Claim(ctx, req)
	if err != nil || len(claims) != len(heads) {
		t.Fatalf("claim: %d claims, %v; want the %d heads", len(claims), err, len(heads))
	}
	req.Limit = 2
	took := completeTakingTurns(t, s, req, lease.Complete, claims...)
	var keys []string
	for _, c := range took {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"taken-1", "taken-2"}) {
		t.Errorf("the completions took the turns of %v; want those of taken-1 and taken-2", keys)
	}
	for key := range next {
		head, err := s.KeyHead(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want := leasework.StatusReady
		if key == "taken-1" || key == "taken-2" {
			want = leasework.StatusInProgress
		}
		if head == nil || head.Status != want {
			t.Errorf("key %s: its next event is %v; want it %s", key, head, want)
		}
	}
	// The one over the limit is left to a claim.
	req.Limit = 100
	more, err := s.Claim(ctx, req)
	if err != nil || len(more) != 1 || more[0].Key != "over-limit" {
		t.Errorf("a claim after the completions took %v (%v); want over-limit's next event alone", more, err)
	}
}
