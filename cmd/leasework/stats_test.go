package main

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestStats(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})

			// Two claimed rows (one completed, one abandoned with an expired
			// lease), one FAILED, two READY and due, one READY for later.
			pgtest.Enqueue(t, st, lease.Event{Kind: "a"}, lease.Event{Kind: "a"})
			claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
			if err != nil || len(claims) != 2 {
				t.Fatalf("claim = %+v, %v", claims, err)
			}
			if _, err := st.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
				t.Fatal(err)
			}
			if err := leasetest.ExpireLease(ctx, st, claims[1].ID); err != nil {
				t.Fatal(err)
			}
			failed(t, st, "b", "boom")
			pgtest.Enqueue(t, st, lease.Event{Kind: "c"}, lease.Event{Kind: "c"},
				lease.Event{Kind: "c", RunAt: time.Now().Add(time.Hour)})

			r := must(t, exitOK, on(t, st, d.Name, "stats", "-json")...)
			var got statsJSON
			decode(t, r, &got)
			age := got.OldestEligibleAge
			got.OldestEligibleAge = 0
			want := statsJSON{Schema: st.Schema(), Table: st.Table(),
				Rows: map[leasework.Status]int64{
					leasework.StatusReady: 3, leasework.StatusInProgress: 1, leasework.StatusDone: 1, leasework.StatusFailed: 1,
					leasework.StatusWaiting: 0, leasework.StatusDiscarded: 0,
				},
				Eligible: 2, ExpiredClaims: 1, Held: []heldKeyJSON{}, PausedQueues: []string{}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("stats -json = %+v\nwant %+v", got, want)
			}
			// The expired lease was moved a second into the past.
			if age < 1 || age > 60 {
				t.Errorf("oldest eligible age = %vs; want about a second", age)
			}

			r = must(t, exitOK, on(t, st, d.Name, "stats")...)
			for _, line := range []string{"READY 3", "INPROGRESS 1", "DONE 1", "FAILED 1", "eligible now 2", "expired claims 1"} {
				if !strings.Contains(squeeze(r.stdout), line) {
					t.Errorf("stats table does not show %q:\n%s", line, r.stdout)
				}
			}
			if !strings.Contains(r.stdout, st.QualifiedTable()) {
				t.Errorf("stats table does not name the table %s:\n%s", st.QualifiedTable(), r.stdout)
			}
		})
	}
}

// squeeze collapses runs of spaces, so a test can look for a table row
// whatever its alignment.
func squeeze(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
