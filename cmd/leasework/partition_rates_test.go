package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Partition rate limits through both drivers: -partition-default -rate
// sets the default of the partitions and -partition P -rate one
// partition's own, and each says what it replaced and the starts in its
// window; limits lists them after the kinds' and queues' rate limits with
// the events they set aside (HELD BACK), the default as (default) with
// its rate "each" and no next room of its own; list -id says which of
// them holds an event set aside, and when it has room; -clear-rate says
// what each clear leaves; the audit records scope rate:partition.
func TestPartitionRateLimits(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			limits := func(args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"limits"}, args...)...)...)
			}

			var set setRateLimitJSON
			decode(t, limits("-partition-default", "-rate", "1/1h", "-by", "alice", "-json"), &set)
			if set.Scope != "rate:partition" || set.Name != "" || set.rateJSON != (rateJSON{Max: 1, Per: "1h0m0s", PerUS: 3_600_000_000}) ||
				set.Old != nil || set.Recent != 0 || set.NextAt != nil || set.HeldBack == nil || *set.HeldBack != 0 {
				t.Errorf("limits -partition-default -rate 1/1h -json = %+v; want rate:partition \"\" 1 per hour, old null, 0 recent, next_at null, 0 held back", set)
			}
			r := limits("-partition", "acme", "-rate", "2/h", "-by", "bob")
			if got, want := strings.TrimSpace(r.stdout), "rate limit of partition acme set to 2 starts per 1h0m0s (was none); 0 in the window now"; got != want {
				t.Errorf("limits -partition acme -rate 2/h printed %q; want %q", got, want)
			}
			r = limits("-partition-default", "-rate", "1/h")
			if got, want := strings.TrimSpace(r.stdout), "default rate limit of the partitions set to 1 start per 1h0m0s each (was 1 per 1h0m0s); 0 in the windows of the partitions under it now"; got != want {
				t.Errorf("limits -partition-default -rate 1/h printed %q; want %q", got, want)
			}
			limits("-kind", "sms", "-rate", "100/1m", "-by", "carol")
			rls, err := st.RateLimits(ctx)
			if err != nil || len(rls) != 3 || rls[0].Scope != lease.ScopeKind ||
				rls[1].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: "", Max: 1, Per: time.Hour}) || rls[1].SetBy != operatorName() ||
				rls[2].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: "acme", Max: 2, Per: time.Hour}) || rls[2].SetBy != "bob" {
				t.Fatalf("stored rate limits = %+v, %v; want kind sms's, then the default of the partitions, 1 an hour (by %s), then acme's, 2 an hour (by bob)", rls, err, operatorName())
			}

			// acme: 2 start, 1 set aside; beta (the default): 1 starts, 1
			// set aside.
			var es []lease.Event
			for _, p := range []string{"acme", "acme", "acme", "beta", "beta"} {
				es = append(es, lease.Event{Kind: "k", Partition: p})
			}
			in := pgtest.Enqueue(t, st, es...)
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
				t.Fatalf("claim under the partition rate limits = %d claims, %v; want 3", len(claims), err)
			}
			rls, err = st.RateLimits(ctx)
			if err != nil || len(rls) != 3 || rls[2].NextAt.IsZero() {
				t.Fatalf("stored rate limits = %+v, %v; want acme's full", rls, err)
			}
			next := rls[2].NextAt.UTC()

			var ls []listedLimit
			decode(t, limits("-json"), &ls)
			if len(ls) != 3 || ls[0].Scope != "rate:kind" || ls[0].HeldBack != nil ||
				ls[1].Scope != "rate:partition" || ls[1].Name != "" || ls[1].Max != 1 || ls[1].Per != "1h0m0s" || ls[1].Recent != 1 ||
				ls[1].NextAt != nil || ls[1].HeldBack == nil || *ls[1].HeldBack != 1 ||
				ls[2].Scope != "rate:partition" || ls[2].Name != "acme" || ls[2].Max != 2 || ls[2].Recent != 2 ||
				ls[2].NextAt == nil || !ls[2].NextAt.Equal(next) || ls[2].HeldBack == nil || *ls[2].HeldBack != 1 || ls[2].SetBy != "bob" {
				t.Errorf("limits -json = %+v; want sms's (held back null); the default, 1 recent, next_at null, 1 held back; acme 2/2, full until %v, 1 held back", ls, next)
			}
			r = limits()
			if line := lineWith(r.stdout, "(default)"); len(line) != 10 || line[0] != "rate:partition" || strings.Join(line[2:4], " ") != "1/1h0m0s each" ||
				line[4] != "1" || line[5] != "-" || line[6] != "1" {
				t.Errorf("limits prints %q for the default; want rate:partition, (default), 1/1h0m0s each, 1 recent, no next room, 1 held back, when, by:\n%s", line, r.stdout)
			}
			if line := lineWith(r.stdout, "acme"); len(line) != 10 || line[0] != "rate:partition" || line[2] != "2/1h0m0s" || line[3] != "2" ||
				strings.Join(line[4:6], " ") != next.Format("2006-01-02 15:04:05.000Z") || line[6] != "1" || line[9] != "bob" {
				t.Errorf("limits prints %q for acme; want rate:partition, acme, 2/1h0m0s, 2 recent, next room at %v, 1 held back, when, bob:\n%s", line, next, r.stdout)
			}
			if line := lineWith(r.stdout, "rate:kind"); len(line) != 9 || line[5] != "-" {
				t.Errorf("limits prints %q for sms's rate limit; want no held back (-):\n%s", line, r.stdout)
			}

			// list -id of the events set aside: which limit, and when.
			one := func(id int64, args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"list", "-id", strconv.FormatInt(id, 10)}, args...)...)...)
			}
			r = one(in[2].ID)
			if line := lineWith(r.stdout, "status"); len(line) != 2 || line[1] != "WAITING" {
				t.Errorf("list -id of acme's event set aside: status %q; want WAITING:\n%s", line, r.stdout)
			}
			if _, why, _ := strings.Cut(r.stdout, "why not running"); !strings.HasPrefix(strings.TrimSpace(why),
				"held by rate limit partition:acme (2/2 starts per 1h0m0s): the next start is allowed at "+next.Format("2006-01-02 15:04:05Z")) {
				t.Errorf("list -id of an event acme's rate limit set aside:\n%s", r.stdout)
			}
			var js oneRowJSON
			decode(t, one(in[2].ID, "-json"), &js)
			if len(js.Why) != 1 {
				t.Fatalf("list -id -json of acme's event set aside = %+v; want one reason", js)
			}
			if w := js.Why[0]; w.Kind != "rate" || w.Scope != "partition" || w.Name != "acme" || w.Partition != "acme" || w.SetAside == nil || !*w.SetAside ||
				w.Max == nil || *w.Max != 2 || w.Recent == nil || *w.Recent != 2 || w.NextAt == nil || !w.NextAt.Equal(next) {
				t.Errorf("list -id -json reason = %+v; want rate, partition acme's own, set aside, 2/2, room at %v", w, next)
			}
			js = oneRowJSON{} // omitted fields stay as they were otherwise
			decode(t, one(in[4].ID, "-json"), &js)
			if len(js.Why) != 1 {
				t.Fatalf("list -id -json of beta's event set aside = %+v; want one reason", js)
			}
			if w := js.Why[0]; w.Kind != "rate" || w.Scope != "partition" || w.Name != "" || w.Partition != "beta" || w.SetAside == nil || !*w.SetAside ||
				!strings.HasPrefix(w.Text, "held by rate limit partition default (1/1 starts per 1h0m0s in partition beta): the next start is allowed at ") {
				t.Errorf("list -id -json reason = %+v; want rate, the default, in partition beta, set aside", w)
			}

			// Clears, and clears of nothing.
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"-partition", "acme", "-clear-rate", "-by", "dave"}, "cleared the rate limit of partition acme: the default rate limit of the partitions applies to it, if one is set; the events it set aside come back as workers claim, as far as the limits left let them"},
				{[]string{"-partition", "acme", "-clear-rate"}, "partition acme had no rate limit of its own; nothing changed"},
				{[]string{"-partition-default", "-clear-rate", "-by", "dave"}, "cleared the default rate limit of the partitions: those without a rate limit of their own are no longer rate limited; the events it set aside come back as workers claim, as far as the limits left let them"},
				{[]string{"-partition-default", "-clear-rate"}, "there was no default rate limit of the partitions; nothing changed"},
			} {
				if got := strings.TrimSpace(limits(c.args...).stdout); got != c.want {
					t.Errorf("limits %v printed %q; want %q", c.args, got, c.want)
				}
			}
			var cl clearLimitJSON
			decode(t, limits("-partition-default", "-clear-rate", "-json"), &cl)
			if cl != (clearLimitJSON{Scope: "rate:partition", Name: "", Cleared: false}) {
				t.Errorf("limits -partition-default -clear-rate -json = %+v", cl)
			}
			if rls, err := st.RateLimits(ctx); err != nil || len(rls) != 1 || rls[0].Scope != lease.ScopeKind {
				t.Errorf("stored rate limits after the clears = %+v, %v; want kind sms's alone", rls, err)
			}
			// The events set aside come back: the claims that follow take
			// them (the first may only make them READY).
			var took int
			for range 3 {
				claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				took += len(claims)
			}
			if took != 2 {
				t.Errorf("claims once the partition rate limits were cleared took %d events; want the 2 set aside", took)
			}

			// The audit: scope rate:partition, the default named (default).
			var cs []limitChangeJSON
			decode(t, limits("-changes", "-n", "2", "-json"), &cs)
			if len(cs) != 2 || cs[0].Scope != "rate:partition" || cs[0].Name != "" || maxOf(cs[0].Old) != 1 || maxOf(cs[0].New) != -1 || cs[0].Per != "1h0m0s" ||
				cs[0].By != "dave" || cs[1].Scope != "rate:partition" || cs[1].Name != "acme" || maxOf(cs[1].Old) != 2 {
				t.Errorf("limits -changes -json = %+v; want the default's clear, then acme's, scope rate:partition", cs)
			}
			r = limits("-changes", "-n", "2")
			if f := lineWith(r.stdout, "(default)"); len(f) != 9 || f[2] != "rate:partition" || f[4] != "-" || f[5] != "1" || f[6] != "none" || f[7] != "1h0m0s" || f[8] != "dave" {
				t.Errorf("limits -changes prints %q for the default's clear; want when, rate:partition, (default), no partition, 1, none, 1h0m0s, dave:\n%s", f, r.stdout)
			}
			if f := lineWith(r.stdout, "acme"); len(f) != 9 || f[2] != "rate:partition" || f[5] != "2" || f[6] != "none" {
				t.Errorf("limits -changes prints %q for acme's clear:\n%s", f, r.stdout)
			}
		})
	}
}
