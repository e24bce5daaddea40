package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/lease"
)

// Requeue carries the generation the page showed, as discard does: a
// requeue from a page loaded before the event was requeued and failed
// again is refused, says why, and leaves the event FAILED; from a fresh
// page it works. A requeue form without a generation is refused.
func TestRequeueCarriesTheGenerationThePageShowed(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	ctx := context.Background()
	r := failedEvent(t, s.store, lease.Event{Kind: "mail"}, "first failure")
	stale := s.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK)
	if want := fmt.Sprintf(`name="generation" value="%d"`, r.Generation); strings.Count(stale.body, want) != 2 {
		t.Fatalf("the event's page does not carry generation %d in its requeue and discard forms:\n%s", r.Generation, stale.body)
	}

	// Meanwhile someone requeues it and it fails again: a new generation.
	if _, err := s.store.Requeue(ctx, lease.RequeueRequest{IDs: []int64{r.ID}, ExtraAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 || claims[0].ID != r.ID {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := s.store.Write(ctx, lease.Fail(claims[0].Ref(), "second failure")); err != nil {
		t.Fatal(err)
	}
	now := row(t, s.store, r.ID)

	p := s.follow(s.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {token(t, stale)}, "generation": {fmt.Sprint(r.Generation)}}))
	contains(t, p, fmt.Sprintf("Event %d was not requeued: the page showed it FAILED at generation %d, and it is FAILED at generation %d now.", r.ID, r.Generation, now.Generation),
		"look at it again")
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusFailed || got.Generation != now.Generation {
		t.Errorf("a stale requeue changed the event: %s at generation %d; want FAILED at %d", got.Status, got.Generation, now.Generation)
	}

	fresh := s.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK)
	p = s.follow(s.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {token(t, fresh)}, "generation": {fmt.Sprint(now.Generation)}}))
	contains(t, p, fmt.Sprintf("Event %d requeued: it is READY, due now", r.ID))
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusReady || got.Generation <= now.Generation {
		t.Errorf("after a fresh requeue: %s at generation %d; want READY above %d", got.Status, got.Generation, now.Generation)
	}

	for _, gen := range []string{"", "x", "0"} {
		p := s.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {token(t, fresh)}, "generation": {gen}})
		if p.status != http.StatusBadRequest {
			t.Errorf("requeue with generation %q: status %d, want 400", gen, p.status)
		}
		contains(t, p, "is not a generation")
	}
}
