package main

import (
	"context"
	"fmt"
	"strconv"
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
			if f := strings.Fields(lines[1]); len(f) != 9 || f[2] != "kind" || f[3] != "send-email" || f[4] != "-" || f[5] != "2" || f[6] != "none" || f[7] != "-" || f[8] != "carol" {
				t.Errorf("limits -changes' latest line is %q; want when, kind, send-email, no partition, 2, none, no period, carol", f)
			}
		})
	}
}

// Partition limits through both drivers: -partition-default sets the
// default of the partitions and -partition one partition's own; limits
// lists them with their live attempts and the events they set aside; list
// -id shows an event's partition and why it is held; list -partition
// selects a partition's events; -clear says what each clear leaves.
func TestPartitionLimits(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			limits := func(args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"limits"}, args...)...)...)
			}

			var set setLimitJSON
			decode(t, limits("-partition-default", "-max", "2", "-by", "alice", "-json"), &set)
			if set != (setLimitJSON{Scope: "partition", Name: "", Max: 2}) {
				t.Errorf("limits -partition-default -max 2 -json = %+v; want partition \"\" 2, old null, 0 live", set)
			}
			r := limits("-partition", "acme", "-max", "1", "-by", "bob")
			if got, want := strings.TrimSpace(r.stdout), "limit of partition acme set to 1 live attempt (was none); 0 live now"; got != want {
				t.Errorf("limits -partition acme -max 1 printed %q; want %q", got, want)
			}
			r = limits("-partition-default", "-max", "2")
			if got, want := strings.TrimSpace(r.stdout), "default limit of the partitions set to 2 live attempts each (was 2); 0 live now in the partitions under it"; got != want {
				t.Errorf("limits -partition-default -max 2 printed %q; want %q", got, want)
			}
			got := storedLimits(t, st)
			if len(got) != 2 || got[0].Limit != (lease.Limit{Scope: lease.ScopePartition, Name: "", Max: 2}) || got[0].SetBy != operatorName() ||
				got[1].Limit != (lease.Limit{Scope: lease.ScopePartition, Name: "acme", Max: 1}) || got[1].SetBy != "bob" {
				t.Fatalf("stored limits = %+v; want the default 2 (by %s), acme 1 (by bob)", got, operatorName())
			}

			// acme: 1 live, 2 set aside; beta (the default): 2 live, 1
			// set aside.
			var es []lease.Event
			for _, p := range []string{"acme", "acme", "acme", "beta", "beta", "beta"} {
				es = append(es, lease.Event{Kind: "k", Partition: p})
			}
			in := pgtest.Enqueue(t, st, es...)
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
				t.Fatalf("claim under the partition limits = %d claims, %v; want 3", len(claims), err)
			}
			var ls []limitJSON
			decode(t, limits("-json"), &ls)
			if len(ls) != 2 || ls[0].Scope != "partition" || ls[0].Name != "" || ls[0].Live != 2 || ls[0].Max != 2 || ls[0].HeldBack != 1 ||
				ls[1].Name != "acme" || ls[1].Live != 1 || ls[1].Max != 1 || ls[1].HeldBack != 2 {
				t.Errorf("limits -json = %+v; want the default 2 live of 2 each, 1 held back; acme 1/1, 2 held back", ls)
			}
			r = limits()
			if line := lineWith(r.stdout, "(default)"); len(line) != 9 || line[0] != "partition" || strings.Join(line[2:5], " ") != "2 (2 each)" || line[5] != "1" {
				t.Errorf("limits prints %q for the default; want partition, (default), 2 (2 each), 1 held back, when, by:\n%s", line, r.stdout)
			}
			if line := lineWith(r.stdout, "acme"); len(line) != 7 || line[0] != "partition" || line[2] != "1/1" || line[3] != "2" || line[6] != "bob" {
				t.Errorf("limits prints %q for acme; want partition, acme, 1/1, 2 held back, when, bob:\n%s", line, r.stdout)
			}

			// list -id of an event set aside, and of one under the default.
			one := func(id int64, args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"list", "-id", strconv.FormatInt(id, 10)}, args...)...)...)
			}
			r = one(in[1].ID)
			for label, want := range map[string]string{
				"partition":       "acme",
				"status":          "WAITING",
				"why not running": "held by concurrency limit partition:acme (1/1 live), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared",
			} {
				var got []string
				for line := range strings.SplitSeq(r.stdout, "\n") {
					if rest, ok := strings.CutPrefix(line, label+" "); ok {
						got = append(got, strings.TrimSpace(rest))
					}
				}
				if len(got) != 1 || got[0] != want {
					t.Errorf("list -id of an event set aside: %s = %q; want %q:\n%s", label, got, want, r.stdout)
				}
			}
			var js oneRowJSON
			decode(t, one(in[5].ID, "-json"), &js)
			if js.Row.Partition != "beta" || len(js.Why) != 1 {
				t.Fatalf("list -id -json of beta's event set aside = %+v; want partition beta, one reason", js)
			}
			if w := js.Why[0]; w.Kind != "partition" || w.Scope != "partition" || w.Name != "" || w.Partition != "beta" || w.SetAside == nil || !*w.SetAside ||
				w.Live == nil || *w.Live != 2 || w.Max == nil || *w.Max != 2 ||
				w.Text != "held by concurrency limit partition default (2/2 live in partition beta), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared" {
				t.Errorf("list -id -json reason = %+v", w)
			}

			// list -partition: acme's events alone, with their partition.
			var page listJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "list", "-partition", "acme", "-json")...), &page)
			if len(page.Rows) != 3 || page.Rows[0].ID != in[0].ID || page.Rows[2].Partition != "acme" {
				t.Errorf("list -partition acme -json = %+v; want acme's 3 events", page.Rows)
			}
			r = must(t, exitOK, on(t, st, d.Name, "list", "-partition", "beta")...)
			if line := lineWith(r.stdout, strconv.FormatInt(in[5].ID, 10)); len(line) < 6 || line[4] != "beta" || line[5] != "WAITING" {
				t.Errorf("list -partition beta prints %q for its event set aside; want partition beta, WAITING:\n%s", line, r.stdout)
			}

			// Clears, and clears of nothing.
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"-partition", "acme", "-clear"}, "cleared the limit of partition acme: the default limit of the partitions applies to it, if one is set; its events set aside come back as workers claim"},
				{[]string{"-partition", "acme", "-clear"}, "partition acme had no limit of its own; nothing changed"},
				{[]string{"-partition-default", "-clear"}, "cleared the default limit of the partitions: those without a limit of their own are no longer limited; their events set aside come back as workers claim"},
				{[]string{"-partition-default", "-clear"}, "there was no default limit of the partitions; nothing changed"},
			} {
				if got := strings.TrimSpace(limits(c.args...).stdout); got != c.want {
					t.Errorf("limits %v printed %q; want %q", c.args, got, c.want)
				}
			}
			var cl clearLimitJSON
			decode(t, limits("-partition-default", "-clear", "-json"), &cl)
			if cl != (clearLimitJSON{Scope: "partition", Name: "", Cleared: false}) {
				t.Errorf("limits -partition-default -clear -json = %+v", cl)
			}
			var cs []limitChangeJSON
			decode(t, limits("-changes", "-n", "2", "-json"), &cs)
			if len(cs) != 2 || cs[0].Scope != "partition" || cs[0].Name != "" || maxOf(cs[0].Old) != 2 || maxOf(cs[0].New) != -1 ||
				cs[1].Name != "acme" || maxOf(cs[1].Old) != 1 {
				t.Errorf("limits -changes -json = %+v; want the default's clear, then acme's", cs)
			}
		})
	}
}

// listedLimit is an entry of limits -json: a concurrency limit's fields
// or a rate limit's. HeldBack is null for a kind's or a queue's rate
// limit.
type listedLimit struct {
	limitJSON
	Per      string     `json:"per"`
	PerUS    int64      `json:"per_us"`
	Recent   int        `json:"recent"`
	NextAt   *time.Time `json:"next_at"`
	HeldBack *int64     `json:"held_back"`
}

// Rate limits through both drivers: -rate sets a kind's or a queue's,
// new or changed, and says what it replaced and the starts in its
// window; limits lists them after the concurrency limits, with their
// recent starts and, while full, when the next start is allowed; list -id
// shows an event's cost and the rate limit that holds it; -clear-rate
// clears one; the audit gives their periods.
func TestRateLimits(t *testing.T) {
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
			decode(t, limits("-kind", "sms.send", "-rate", "3/1m", "-by", "alice", "-json"), &set)
			if want := (setRateLimitJSON{Scope: "rate:kind", Name: "sms.send", rateJSON: rateJSON{Max: 3, Per: "1m0s", PerUS: 60_000_000}}); set.Scope != want.Scope ||
				set.Name != want.Name || set.rateJSON != want.rateJSON || set.Old != nil || set.Recent != 0 || set.NextAt != nil {
				t.Errorf("limits -kind sms.send -rate 3/1m -json = %+v; want %+v", set, want)
			}
			r := limits("-kind", "sms.send", "-rate", "3/h", "-by", "alice")
			if got, want := strings.TrimSpace(r.stdout), "rate limit of kind sms.send set to 3 starts per 1h0m0s (was 3 per 1m0s); 0 in the window now"; got != want {
				t.Errorf("limits -kind sms.send -rate 3/h printed %q; want %q", got, want)
			}
			r = limits("-queue", "default", "-rate", "1/500ms", "-by", "bob")
			if got, want := strings.TrimSpace(r.stdout), "rate limit of queue default set to 1 start per 500ms (was none); 0 in the window now"; got != want {
				t.Errorf("limits -queue default -rate 1/500ms printed %q; want %q", got, want)
			}
			limits("-queue", "default", "-rate", "100/1s")
			limits("-kind", "sms.send", "-max", "5", "-by", "carol")
			rls, err := st.RateLimits(ctx)
			if err != nil || len(rls) != 2 || rls[0].RateLimit != (lease.RateLimit{Scope: lease.ScopeKind, Name: "sms.send", Max: 3, Per: time.Hour}) ||
				rls[0].SetBy != "alice" || rls[1].RateLimit != (lease.RateLimit{Scope: lease.ScopeQueue, Name: "default", Max: 100, Per: time.Second}) ||
				rls[1].SetBy != operatorName() {
				t.Fatalf("stored rate limits = %+v, %v; want kind sms.send 3 per hour (by alice), queue default 100 per second (by %s)", rls, err, operatorName())
			}

			// Three starts of sms.send fill its window; the fourth event,
			// and the fifth, which costs 2, wait.
			in := pgtest.Enqueue(t, st, lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"},
				lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send", Cost: 2})
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
				t.Fatalf("claim under a rate limit of 3 = %d claims, %v; want 3", len(claims), err)
			}
			rls, err = st.RateLimits(ctx)
			if err != nil || rls[0].Recent != 3 || rls[0].NextAt.IsZero() {
				t.Fatalf("stored rate limits = %+v, %v; want sms.send full", rls, err)
			}
			next := rls[0].NextAt.UTC()

			var ls []listedLimit
			decode(t, limits("-json"), &ls)
			if len(ls) != 3 || ls[0].Scope != "kind" || ls[0].Live != 3 || ls[0].Max != 5 ||
				ls[1].Scope != "rate:kind" || ls[1].Name != "sms.send" || ls[1].Max != 3 || ls[1].Per != "1h0m0s" || ls[1].PerUS != 3_600_000_000 ||
				ls[1].Recent != 3 || ls[1].NextAt == nil || !ls[1].NextAt.Equal(next) || ls[1].SetBy != "alice" ||
				ls[2].Scope != "rate:queue" || ls[2].Name != "default" || ls[2].Max != 100 || ls[2].Per != "1s" || ls[2].NextAt != nil ||
				ls[0].HeldBack == nil || ls[1].HeldBack != nil || ls[2].HeldBack != nil {
				t.Errorf("limits -json = %+v; want the kind's concurrency limit, 3 live of 5 (its held back 0, not null); sms.send 3/3 per hour, full until %v; queue default 100 per second; neither rate limit with a held back", ls, next)
			}
			r = limits()
			tables := strings.Split(strings.TrimSpace(r.stdout), "\n\n")
			if len(tables) != 2 || !strings.HasPrefix(tables[0], "SCOPE") {
				t.Fatalf("limits printed %d tables; want the concurrency limits', then the rate limits':\n%s", len(tables), r.stdout)
			}
			if header := strings.Fields(strings.SplitN(tables[1], "\n", 2)[0]); strings.Join(header, " ") != "SCOPE NAME MAX/PERIOD RECENT NEXT ROOM HELD BACK SET AT SET BY" {
				t.Errorf("rate limits header = %q", header)
			}
			if line := lineWith(tables[1], "rate:kind"); len(line) != 10 || line[1] != "sms.send" || line[2] != "3/1h0m0s" || line[3] != "3" ||
				strings.Join(line[4:6], " ") != next.Format("2006-01-02 15:04:05.000Z") || line[6] != "-" || line[9] != "alice" {
				t.Errorf("limits prints %q for sms.send's rate limit; want rate:kind, sms.send, 3/1h0m0s, 3 recent, next room at %v, no held back, when, alice:\n%s", line, next, r.stdout)
			}
			if line := lineWith(tables[1], "rate:queue"); len(line) != 9 || line[1] != "default" || line[2] != "100/1s" || line[4] != "now" || line[5] != "-" {
				t.Errorf("limits prints %q for the queue's rate limit; want rate:queue, default, 100/1s, its recent starts, room now, no held back:\n%s", line, r.stdout)
			}
			r = limits("-kind", "sms.send", "-rate", "2/1h")
			if got, want := strings.TrimSpace(r.stdout), "rate limit of kind sms.send set to 2 starts per 1h0m0s (was 3 per 1h0m0s); 3 in the window now: it is full, and the next start is allowed at "+next.Format("2006-01-02 15:04:05.000Z"); got != want {
				t.Errorf("lowering the rate limit printed %q; want %q", got, want)
			}
			limits("-kind", "sms.send", "-rate", "3/1h")

			// list -id: the event's cost, and the rate limit that holds it.
			one := func(id int64, args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"list", "-id", strconv.FormatInt(id, 10)}, args...)...)...)
			}
			r = one(in[4].ID)
			for label, want := range map[string]string{"cost": "2", "status": "READY"} {
				if line := lineWith(r.stdout, label); len(line) != 2 || line[1] != want {
					t.Errorf("list -id: %s = %q; want %q:\n%s", label, line, want, r.stdout)
				}
			}
			if _, why, _ := strings.Cut(r.stdout, "why not running"); !strings.HasPrefix(strings.TrimSpace(why),
				"held by rate limit kind:sms.send (3/3 starts per 1h0m0s): it costs 2 starts, which the window has room for at ") {
				t.Errorf("list -id of an event held by a rate limit:\n%s", r.stdout)
			}
			var js oneRowJSON
			decode(t, one(in[4].ID, "-json"), &js)
			if js.Row.Cost != 2 || len(js.Why) != 1 {
				t.Fatalf("list -id -json of an event costing 2 = %+v; want cost 2, one reason", js)
			}
			if w := js.Why[0]; w.Kind != "rate" || w.Scope != "kind" || w.Name != "sms.send" || w.Max == nil || *w.Max != 3 || w.Per != "1h0m0s" ||
				w.PerUS != 3_600_000_000 || w.Recent == nil || *w.Recent != 3 || w.Cost == nil || *w.Cost != 2 || w.NextAt == nil || w.NextAt.IsZero() ||
				!strings.HasPrefix(w.Text, "held by rate limit kind:sms.send (3/3 starts per 1h0m0s): it costs 2 starts") {
				t.Errorf("list -id -json reason = %+v", w)
			}
			decode(t, one(in[3].ID, "-json"), &js)
			if js.Row.Cost != 1 || len(js.Why) != 1 || js.Why[0].NextAt == nil || !js.Why[0].NextAt.Equal(next) {
				t.Errorf("list -id -json of an event costing 1 = %+v; want cost 1, the next start at %v", js, next)
			}

			// Clears, and a clear of nothing.
			var cl clearLimitJSON
			decode(t, limits("-queue", "default", "-clear-rate", "-json"), &cl)
			if cl != (clearLimitJSON{Scope: "rate:queue", Name: "default", Cleared: true}) {
				t.Errorf("limits -queue default -clear-rate -json = %+v", cl)
			}
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"-kind", "sms.send", "-clear-rate", "-by", "dave"}, "cleared the rate limit of kind sms.send: its attempts start as workers claim them"},
				{[]string{"-kind", "sms.send", "-clear-rate"}, "kind sms.send had no rate limit; nothing changed"},
			} {
				if got := strings.TrimSpace(limits(c.args...).stdout); got != c.want {
					t.Errorf("limits %v printed %q; want %q", c.args, got, c.want)
				}
			}
			if got := storedLimits(t, st); len(got) != 1 || got[0].Max != 5 {
				t.Errorf("stored concurrency limits after clearing the rate limits = %+v; want sms.send's, 5", got)
			}
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 2 {
				t.Errorf("claim once the rate limit was cleared = %d claims, %v; want the 2 held (5 live, the concurrency limit)", len(claims), err)
			}

			// The audit: the rate limits' changes with their periods.
			var cs []limitChangeJSON
			decode(t, limits("-changes", "-n", "3", "-json"), &cs)
			if len(cs) != 3 || cs[0].Scope != "rate:kind" || cs[0].By != "dave" || maxOf(cs[0].Old) != 3 || maxOf(cs[0].New) != -1 || cs[0].Per != "1h0m0s" ||
				cs[0].PerUS != 3_600_000_000 || cs[1].Scope != "rate:queue" || cs[1].Per != "1s" || cs[2].Scope != "rate:kind" || maxOf(cs[2].Old) != 2 || maxOf(cs[2].New) != 3 {
				t.Errorf("limits -changes -json = %+v; want the clears of sms.send's (3 per hour) and the queue's (per second), then sms.send's raise", cs)
			}
			r = limits("-changes", "-n", "1")
			if f := lineWith(r.stdout, "rate:kind"); len(f) != 9 || f[3] != "sms.send" || f[4] != "-" || f[5] != "3" || f[6] != "none" || f[7] != "1h0m0s" || f[8] != "dave" {
				t.Errorf("limits -changes -n 1 prints %q; want when, rate:kind, sms.send, no partition, 3, none, 1h0m0s, dave:\n%s", f, r.stdout)
			}
			if r := limits(); strings.Contains(r.stdout, "rate:") || !strings.HasPrefix(r.stdout, "SCOPE") {
				t.Errorf("limits once the rate limits were cleared:\n%s", r.stdout)
			}
		})
	}
}

// A table with rate limits alone lists them alone.
func TestRateLimitsAlone(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	if _, _, err := st.SetRateLimit(context.Background(), lease.RateLimit{Scope: lease.ScopeQueue, Name: "bulk", Max: 10, Per: time.Minute}, "ops"); err != nil {
		t.Fatal(err)
	}
	r := must(t, exitOK, on(t, st, pgtest.Drivers[0].Name, "limits")...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "SCOPE") || !strings.Contains(lines[0], "MAX/PERIOD") || strings.Join(strings.Fields(lines[1])[:6], " ") != "rate:queue bulk 10/1m0s 0 now -" {
		t.Errorf("limits with one rate limit alone printed:\n%s", r.stdout)
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
