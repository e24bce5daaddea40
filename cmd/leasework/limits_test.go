package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// limits sets, lists, lowers, holds and clears limits through both
// drivers: each command's output says what it did, the store reads back
// what it wrote, with who wrote it, claims keep it, and the audit lists
// every change, latest first.
func TestLimits(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			limits := func(args ...string) []string { return on(t, st, d.Name, append([]string{"limits"}, args...)...) }

			if r := must(t, exitOK, limits()...); strings.TrimSpace(r.stdout) != "no limits are set" {
				t.Errorf("limits on a table without any: %q", r.stdout)
			}
			var none []limitJSON
			decode(t, must(t, exitOK, limits("-json")...), &none)
			if none == nil || len(none) != 0 {
				t.Errorf("limits -json without any = %#v; want []", none)
			}

			var set setLimitJSON
			decode(t, must(t, exitOK, limits("-kind", "send-email", "-max", "5", "-by", "alice", "-json")...), &set)
			if set != (setLimitJSON{Scope: "kind", Name: "send-email", Max: 5}) {
				t.Errorf("limits -kind send-email -max 5 -json = %+v; want kind send-email 5, old null, 0 live", set)
			}
			got := storedLimits(t, st)
			if len(got) != 1 || got[0].Limit != (lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 5}) || got[0].SetBy != "alice" {
				t.Fatalf("stored limits = %+v; want kind send-email 5, set by alice", got)
			}

			// Three attempts live under it.
			pgtest.Enqueue(t, st, lease.Event{Kind: "send-email"}, lease.Event{Kind: "send-email"}, lease.Event{Kind: "send-email"})
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
				t.Fatalf("claim under a limit of 5 = %d claims, %v; want 3", len(claims), err)
			}
			var ls []limitJSON
			decode(t, must(t, exitOK, limits("-json")...), &ls)
			if len(ls) != 1 || ls[0].Live != 3 || ls[0].Max != 5 || ls[0].SetBy != "alice" || !ls[0].SetAt.Equal(got[0].SetAt) {
				t.Errorf("limits -json = %+v; want send-email 3 live of 5, set by alice at %v", ls, got[0].SetAt)
			}
			r := must(t, exitOK, limits()...)
			if line := lineWith(r.stdout, "send-email"); len(line) != 7 || line[0] != "kind" || line[2] != "3/5" || line[3] != "0" || line[6] != "alice" {
				t.Errorf("limits prints %q for send-email; want kind, send-email, 3/5, 0 held back, when, alice:\n%s", line, r.stdout)
			}

			// Lowered below the live attempts, by the operator's own name:
			// the attempts holding slots past 2 keep them and run on, and
			// the output counts all 3, as the store does.
			r = must(t, exitOK, limits("-kind", "send-email", "-max", "2")...)
			got = storedLimits(t, st)
			if len(got) != 1 || got[0].Max != 2 || got[0].Live != 3 || got[0].SetBy != operatorName() {
				t.Fatalf("stored limits after lowering = %+v; want send-email 2, 3 live (claimed before), set by %q (the user name)", got, operatorName())
			}
			want := fmt.Sprintf("limit of kind send-email set to 2 live attempts (was 5); %d live now; attempts that held its slots past 2 run on outside it until they end", got[0].Live)
			if strings.TrimSpace(r.stdout) != want {
				t.Errorf("lowering the limit printed %q; want %q", r.stdout, want)
			}
			pgtest.Enqueue(t, st, lease.Event{Kind: "send-email"})
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 0 {
				t.Errorf("claim with %d live under a limit of 2 = %d claims, %v; want 0", got[0].Live, len(claims), err)
			}
			// The limit is full: it holds the new event back.
			decode(t, must(t, exitOK, limits("-json")...), &ls)
			if len(ls) != 1 || ls[0].Live != 3 || ls[0].Max != 2 || ls[0].HeldBack != 1 {
				t.Errorf("limits -json with the limit full = %+v; want send-email 3 live of 2, 1 held back", ls)
			}
			r = must(t, exitOK, limits()...)
			if line := lineWith(r.stdout, "send-email"); len(line) != 7 || line[2] != "3/2" || line[3] != "1" {
				t.Errorf("limits prints %q for send-email; want 3/2 live, 1 held back:\n%s", line, r.stdout)
			}
			if header := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0]); strings.Join(header, " ") != "SCOPE NAME LIVE/MAX HELD BACK SET AT SET BY" {
				t.Errorf("limits header = %q", header)
			}

			// A queue held: a limit of 0.
			r = must(t, exitOK, limits("-queue", "bulk", "-max", "0", "-by", "bob")...)
			if !strings.Contains(r.stdout, "limit of queue bulk set to 0 live attempts (was none); no attempt of it starts") {
				t.Errorf("holding queue bulk printed %q", r.stdout)
			}
			r = must(t, exitOK, limits()...)
			if line := lineWith(r.stdout, "bulk"); len(line) != 8 || line[0] != "queue" || line[2] != "0/0" || line[3] != "held" || line[4] != "0" || line[7] != "bob" {
				t.Errorf("limits prints %q for bulk; want queue, bulk, 0/0 held, 0 held back, when, bob:\n%s", line, r.stdout)
			}
			if !strings.HasPrefix(r.stdout, "SCOPE") || strings.Index(r.stdout, "send-email") > strings.Index(r.stdout, "bulk") {
				t.Errorf("limits does not list kind send-email before queue bulk, under a header:\n%s", r.stdout)
			}

			// Cleared, then cleared again: the second changes nothing and
			// writes no change.
			var cl clearLimitJSON
			decode(t, must(t, exitOK, limits("-kind", "send-email", "-clear", "-by", "carol", "-json")...), &cl)
			if cl != (clearLimitJSON{Scope: "kind", Name: "send-email", Cleared: true}) {
				t.Errorf("limits -kind send-email -clear -json = %+v", cl)
			}
			r = must(t, exitOK, limits("-kind", "send-email", "-clear", "-by", "carol")...)
			if strings.TrimSpace(r.stdout) != "kind send-email had no limit; nothing changed" {
				t.Errorf("clearing again printed %q", r.stdout)
			}
			got = storedLimits(t, st)
			if len(got) != 1 || got[0].Scope != lease.ScopeQueue || got[0].Name != "bulk" || got[0].Max != 0 {
				t.Errorf("stored limits after clearing send-email = %+v; want only queue bulk, 0", got)
			}

			var cs []limitChangeJSON
			decode(t, must(t, exitOK, limits("-changes", "-json")...), &cs)
			wantChanges := []struct {
				scope, name string
				old, new    int
				by          string
			}{
				{"kind", "send-email", 2, -1, "carol"},
				{"queue", "bulk", -1, 0, "bob"},
				{"kind", "send-email", 5, 2, operatorName()},
				{"kind", "send-email", -1, 5, "alice"},
			}
			if len(cs) != len(wantChanges) {
				t.Fatalf("limits -changes -json = %+v; want %d changes", cs, len(wantChanges))
			}
			for i, w := range wantChanges {
				c := cs[i]
				if c.Scope != w.scope || c.Name != w.name || maxOf(c.Old) != w.old || maxOf(c.New) != w.new || c.By != w.by || c.At.IsZero() {
					t.Errorf("change %d = %+v; want %+v", i, c, w)
				}
			}
			decode(t, must(t, exitOK, limits("-changes", "-n", "1", "-json")...), &cs)
			if len(cs) != 1 || cs[0].By != "carol" {
				t.Errorf("limits -changes -n 1 -json = %+v; want carol's clear only", cs)
			}
			r = must(t, exitOK, limits("-changes")...)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 5 || !strings.HasPrefix(lines[0], "AT") {
				t.Fatalf("limits -changes printed %d lines; want a header and 4 changes:\n%s", len(lines), r.stdout)
			}
			if f := strings.Fields(lines[1]); len(f) != 7 || f[2] != "kind" || f[3] != "send-email" || f[4] != "2" || f[5] != "none" || f[6] != "carol" {
				t.Errorf("limits -changes' latest line is %q; want when, kind, send-email, 2, none, carol", f)
			}
		})
	}
}

// A table whose limits were never changed has an empty audit.
func TestLimitChangesEmpty(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	if r := must(t, exitOK, on(t, st, "pgx", "limits", "-changes")...); strings.TrimSpace(r.stdout) != "no limit has been set" {
		t.Errorf("limits -changes on a new table: %q", r.stdout)
	}
	var cs []limitChangeJSON
	decode(t, must(t, exitOK, on(t, st, "pgx", "limits", "-changes", "-json")...), &cs)
	if cs == nil || len(cs) != 0 {
		t.Errorf("limits -changes -json on a new table = %#v; want []", cs)
	}
}

func storedLimits(t *testing.T, st *lease.Store) []lease.LimitInfo {
	t.Helper()
	ls, err := st.Limits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// lineWith returns the fields of the first line of out that has word as a
// field.
func lineWith(out, word string) []string {
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		for _, w := range f {
			if w == word {
				return f
			}
		}
	}
	return nil
}

// maxOf is a limit of the audit's JSON as the store gives it: -1 for null.
func maxOf(n *int) int {
	if n == nil {
		return -1
	}
	return *n
}

// On a schema from before the limits, limits fails and says to migrate.
func TestLimitsBeforeTheirMigration(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for _, suffix := range []string{"limit_changes", "limit_releases", "limit_slots", "limits"} {
		q := "DROP TABLE " + lease.QuoteIdent(st.Schema()) + "." + lease.QuoteIdent(st.Table()+"_"+suffix)
		if _, err := st.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"limits"}, {"limits", "-kind", "k", "-max", "1"}, {"limits", "-changes"}} {
		r := must(t, exitError, on(t, st, "pgx", args...)...)
		if want := "leasework migrate -schema " + st.Schema(); !strings.Contains(r.stderr, want) {
			t.Errorf("leasework %v on a schema without limits: stderr %q; want the hint %q", args, r.stderr, want)
		}
	}
}
