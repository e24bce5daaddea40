package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Cancelling an event a worker runs says that its attempt is told to stop
// and that the event ends once it has; the event's page shows it INPROGRESS
// with when it was cancelled, and DISCARDED once its owner has stopped.
func TestCancelOfARunningEvent(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	ctx := context.Background()
	id := pgtest.Enqueue(t, s.store, lease.Event{Kind: "report"})[0].ID
	claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	path := fmt.Sprintf("events/%d", id)
	p := s.follow(s.post(path+"/cancel", url.Values{"csrf": {token(t, s.get(path, http.StatusOK))}, "reason": {"not needed"}}))
	contains(t, p, fmt.Sprintf("Event %d cancelled: the attempt running it (generation %d) is told to stop", id, claims[0].Generation),
		"INPROGRESS", "Cancelled", "its running attempt is told to stop", "cancelled: not needed")
	if _, err := s.store.Write(ctx, lease.Release(claims[0].Ref())); err == nil {
		t.Fatal("release by the cancelled attempt was accepted")
	}
	p = s.get(path, http.StatusOK)
	contains(t, p, "DISCARDED", "Cancelled")
	lacks(t, p, "its running attempt is told to stop")
	if got := row(t, s.store, id); got.Status != leasework.StatusDiscarded || got.CancelledAt == nil {
		t.Errorf("event after its attempt stopped: %+v; want DISCARDED, cancelled", got)
	}
}
