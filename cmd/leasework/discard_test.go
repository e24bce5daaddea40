package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// heldKey makes key x held: three events of the key, the first claimed and
// FAILED with reason. It returns the three row ids.
func heldKey(t *testing.T, st *lease.Store, reason string) [3]int64 {
	t.Helper()
	ctx := context.Background()
	out := pgtest.Enqueue(t, st, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"})
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	if err != nil || len(claims) != 1 || claims[0].ID != out[0].ID {
		t.Fatalf("claim = %+v, %v; want the head, row %d, only", claims, err, out[0].ID)
	}
	if _, err := st.Write(ctx, lease.Fail(claims[0].Ref(), reason)); err != nil {
		t.Fatal(err)
	}
	return [3]int64{out[0].ID, out[1].ID, out[2].ID}
}

func TestDiscardReleasesTheKey(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t, d.New(), lease.Options{})
			ids := heldKey(t, st, "card declined")
			id := strconv.FormatInt(ids[0], 10)

			// A generation the operator did not see: refused, nothing changed.
			r := must(t, exitError, on(t, st, d.Name, "discard", "-id", id, "-generation", "7")...)
			if !strings.Contains(r.stderr, "it is FAILED at generation 1") || !strings.Contains(r.stderr, "not a FAILED row at that generation") {
				t.Errorf("discard at a wrong generation said:\n%s", r.stderr)
			}
			if row := get(t, st, ids[0]); row.Status != leasework.StatusFailed || row.Generation != 1 {
				t.Fatalf("row after a refused discard = %s generation %d", row.Status, row.Generation)
			}
			// A WAITING row is not discarded either.
			must(t, exitError, on(t, st, d.Name, "discard", "-id", strconv.FormatInt(ids[1], 10), "-generation", "1")...)
			r = must(t, exitError, on(t, st, d.Name, "discard", "-id", "999999", "-generation", "1")...)
			if !strings.Contains(r.stderr, "no such event") {
				t.Errorf("discard of a missing row said:\n%s", r.stderr)
			}

			r = must(t, exitOK, on(t, st, d.Name, "discard", "-id", id, "-generation", "1", "-json")...)
			var got discardJSON
			decode(t, r, &got)
			if got.ID != ids[0] || got.Generation != 2 || got.Key != "x" || got.Promoted == nil || *got.Promoted != ids[1] {
				t.Fatalf("discard -json = %+v; want row %d at generation 2, key x, row %d promoted", got, ids[0], ids[1])
			}
			for i, want := range []leasework.Status{leasework.StatusDiscarded, leasework.StatusReady, leasework.StatusWaiting} {
				if row := get(t, st, ids[i]); row.Status != want {
					t.Errorf("row %d after discard is %s, want %s", ids[i], row.Status, want)
				}
			}
			// Discarding it again: it is no longer FAILED.
			must(t, exitError, on(t, st, d.Name, "discard", "-id", id, "-generation", "2")...)
		})
	}
}

func TestDiscardTableOutput(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ids := heldKey(t, st, "boom")
	r := must(t, exitOK, on(t, st, "pgx", "discard", "-id", strconv.FormatInt(ids[0], 10), "-generation", "1")...)
	want := "discarded row " + strconv.FormatInt(ids[0], 10) + ` (generation now 2); key "x" released: row ` + strconv.FormatInt(ids[1], 10) + " is next\n"
	if r.stdout != want {
		t.Fatalf("discard printed %q, want %q", r.stdout, want)
	}
}

// list -held and stats name the held key, the FAILED row, its error and
// the events waiting behind it.
func TestHeldKeysListedAndCounted(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t, d.New(), lease.Options{})
			r := must(t, exitOK, on(t, st, d.Name, "list", "-held")...)
			if !strings.Contains(r.stdout, "no key is held") {
				t.Errorf("list -held of a table without held keys printed:\n%s", r.stdout)
			}
			ids := heldKey(t, st, "card declined")

			r = must(t, exitOK, on(t, st, d.Name, "list", "-held", "-json")...)
			var got heldListJSON
			decode(t, r, &got)
			if len(got.Held) != 1 || got.Held[0].Key != "x" || got.Held[0].HeadID != ids[0] || got.Held[0].Generation != 1 ||
				got.Held[0].LastError != "card declined" || got.Held[0].Waiting != 2 || got.Held[0].FailedAt.IsZero() {
				t.Fatalf("list -held -json = %+v", got)
			}
			r = must(t, exitOK, on(t, st, d.Name, "list", "-held")...)
			if line := squeeze(r.stdout); !strings.Contains(line, "x "+strconv.FormatInt(ids[0], 10)+" 1 ") || !strings.Contains(line, " 2 card declined") {
				t.Errorf("list -held table:\n%s", r.stdout)
			}

			r = must(t, exitOK, on(t, st, d.Name, "stats", "-json")...)
			var stats statsJSON
			decode(t, r, &stats)
			if stats.HeldKeys != 1 || stats.Rows[leasework.StatusWaiting] != 2 || stats.Rows[leasework.StatusFailed] != 1 || len(stats.Held) != 1 || stats.Held[0].HeadID != ids[0] {
				t.Fatalf("stats -json = %+v", stats)
			}
			r = must(t, exitOK, on(t, st, d.Name, "stats")...)
			for _, want := range []string{"WAITING 2", "held keys 1", "key x: row " + strconv.FormatInt(ids[0], 10) + " (generation 1) FAILED: card declined; 2 waiting"} {
				if !strings.Contains(squeeze(r.stdout), want) {
					t.Errorf("stats table does not show %q:\n%s", want, r.stdout)
				}
			}
			r = must(t, exitOK, on(t, st, d.Name, "list", "-status", "waiting")...)
			if n := strings.Count(r.stdout, "WAITING"); n != 2 {
				t.Errorf("list -status waiting shows %d WAITING rows, want 2:\n%s", n, r.stdout)
			}
		})
	}
}
