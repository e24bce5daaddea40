package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// cancel stops a running event: its owner's next write is rejected as
// cancelled and ends it DISCARDED; a finished one is an error, a missing
// -id a usage error.
func TestCancelARunningEvent(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t, d.New(), lease.Options{})
			e := pgtest.Enqueue(t, st, lease.Event{Kind: "k"})[0]
			claims, err := st.Claim(t.Context(), lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim = %v, %v", claims, err)
			}
			id := strconv.FormatInt(e.ID, 10)
			var got cancelJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "cancel", "-id", id, "-reason", "duplicate order", "-json")...), &got)
			if got.ID != e.ID || got.Generation != claims[0].Generation || !got.Stopping {
				t.Errorf("cancel -json = %+v; want row %d stopping, at its attempt's generation %d", got, e.ID, claims[0].Generation)
			}
			if _, err := st.Write(t.Context(), lease.Complete(claims[0].Ref())); !strings.Contains(errText(err), "cancelled") {
				t.Errorf("the owner's completion after cancel: %v; want it rejected as cancelled", err)
			}
			r, err := st.Get(t.Context(), e.ID)
			if err != nil || r.Status != leasework.StatusDiscarded || r.LastError != "cancelled: duplicate order" {
				t.Errorf("row: %+v, %v", r, err)
			}
			if r := must(t, exitError, on(t, st, d.Name, "cancel", "-id", id)...); !strings.Contains(r.stderr, "DISCARDED") {
				t.Errorf("cancelling a finished event: stderr %q; want it to say the row is DISCARDED", r.stderr)
			}
			if r := must(t, exitUsage, on(t, st, d.Name, "cancel")...); !strings.Contains(r.stderr, "-id") {
				t.Errorf("cancel without -id: stderr %q; want a usage error naming -id", r.stderr)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
