package main

import (
	"strings"
	"testing"

	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// On a table with a history (and fresh statistics), explain shows the
// claim reading indexes only, and the explained claim is rolled back.
func TestExplainShowsAnIndexDrivenClaimAndClaimsNothing(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	if err := leasetest.InsertFinished(t.Context(), st, 20000); err != nil {
		t.Fatal(err)
	}
	events := []lease.Event{{Kind: "a"}}
	for range 20 {
		events = append(events, lease.Event{Kind: "b"})
	}
	pgtest.Enqueue(t, st, events...)

	r := must(t, exitOK, on(t, st, "pgx", "explain", "-limit", "10")...)
	for _, want := range []string{"Index Scan using events_queue_ready_idx", "sequential scans: none", "rows read and discarded by filters: 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("explain output lacks %q:\n%s", want, r.stdout)
		}
	}

	var got explainJSON
	decode(t, must(t, exitOK, on(t, st, "pgx", "explain", "-kind", "a", "-json")...), &got)
	// Restricted to kind a, the claim reads the READY rows of kind b in
	// due order and discards them: eligible rows of other kinds cost,
	// finished rows do not.
	if got.SeqScans != 0 || got.RowsDiscarded != 20 || got.Queue != lease.DefaultQueue || got.ClaimLimit != 100 || len(got.ClaimedKinds) != 1 || got.ClaimedKinds[0] != "a" || !strings.Contains(got.Plan, "LockRows") {
		t.Fatalf("explain -json = %+v", got)
	}

	// The explained claims were rolled back: every row is still READY at
	// generation 0.
	rows, err := st.List(t.Context(), lease.ListRequest{Status: "READY"})
	if err != nil || len(rows) != len(events) {
		t.Fatalf("READY rows after explain: %d, %v; want %d", len(rows), err, len(events))
	}
	for _, r := range rows {
		if r.Status != "READY" || r.Generation != 0 {
			t.Fatalf("row %d is %s generation %d after explain; want READY 0", r.ID, r.Status, r.Generation)
		}
	}

	if r := must(t, exitUsage, on(t, st, "pgx", "explain", "-limit", "0")...); !strings.Contains(r.stderr, "-limit") {
		t.Fatalf("explain -limit 0: stderr %q; want a usage error naming -limit", r.stderr)
	}
}
