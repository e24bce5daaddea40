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

// listedFair is an entry of limits -json: a weight's fields or an
// aging's.
type listedFair struct {
	Scope     string    `json:"scope"`
	Name      string    `json:"name"`
	Partition string    `json:"partition"`
	Weight    int       `json:"weight"`
	Active    int       `json:"active"`
	SetAt     time.Time `json:"set_at"`
	SetBy     string    `json:"set_by"`
	After     string    `json:"after"`
	AfterUS   int64     `json:"after_us"`
}

// Weights and priority aging through both drivers: -weight sets a
// partition's weight (saying the queue is not fair yet) and the queue's
// default (making it fair), -aging the queue's aging; limits lists the
// weights with the partitions served now, and the agings, in tables of
// their own and in -json; list -id says how far a partition ahead is; the
// audit gives each change with its partition, or the aging's wait;
// -clear-weight and -clear-aging say what each clear leaves, and a clear
// of nothing changes nothing.
func TestFairWeightsAndAging(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			limits := func(args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"limits"}, args...)...)...)
			}
			text := func(args ...string) string { return strings.TrimSpace(limits(args...).stdout) }

			if got, want := text("-queue", "bulk", "-partition", "acme", "-weight", "3", "-by", "alice"),
				"weight of partition acme in queue bulk set to 3 (was none); queue bulk is not fair until its default weight is set (leasework limits -queue bulk -weight N)"; got != want {
				t.Errorf("limits -queue bulk -partition acme -weight 3 printed %q; want %q", got, want)
			}
			var set setWeightJSON
			decode(t, limits("-queue", "bulk", "-weight", "1", "-by", "alice", "-json"), &set)
			if set != (setWeightJSON{Scope: "weight", Name: "bulk", Partition: "", Weight: 1, Fair: true}) {
				t.Errorf("limits -queue bulk -weight 1 -json = %+v; want the default 1, old null, fair", set)
			}
			if got, want := text("-queue", "bulk", "-weight", "2"), "default weight of queue bulk set to 2 (was 1); 0 partitions served now"; got != want {
				t.Errorf("limits -queue bulk -weight 2 printed %q; want %q", got, want)
			}
			if got, want := text("-queue", "bulk", "-aging", "10m", "-by", "bob"),
				"priority aging of queue bulk set to 10m0s (was none): a due event that has waited longer is claimed as one priority level higher"; got != want {
				t.Errorf("limits -queue bulk -aging 10m printed %q; want %q", got, want)
			}
			var aged setAgingJSON
			decode(t, limits("-queue", "bulk", "-aging", "1h", "-by", "bob", "-json"), &aged)
			if aged.Scope != "aging" || aged.Name != "bulk" || aged.After != "1h0m0s" || aged.AfterUS != 3_600_000_000 || aged.Old == nil || aged.Old.After != "10m0s" || aged.Old.AfterUS != 600_000_000 {
				t.Errorf("limits -queue bulk -aging 1h -json = %+v (old %+v); want 1h0m0s, old 10m0s", aged, aged.Old)
			}
			ws, err := st.Weights(ctx)
			if err != nil || len(ws) != 2 || ws[0].Weight != (lease.Weight{Queue: "bulk", Weight: 2}) || ws[0].SetBy != operatorName() ||
				ws[1].Weight != (lease.Weight{Queue: "bulk", Partition: "acme", Weight: 3}) || ws[1].SetBy != "alice" {
				t.Fatalf("stored weights = %+v, %v; want bulk's default 2 (by %s), acme 3 (by alice)", ws, err, operatorName())
			}
			if as, err := st.Agings(ctx); err != nil || len(as) != 1 || as["bulk"] != time.Hour {
				t.Fatalf("stored agings = %v, %v; want bulk's, an hour", as, err)
			}

			// A claim of kind a alone takes acme's first 3 rows: both
			// partitions are served, acme 3 rows (a pass of 1, at weight
			// 3) ahead of beta.
			var es []lease.Event
			for range 4 {
				es = append(es, lease.Event{Kind: "a", Queue: "bulk", Partition: "acme"})
			}
			es = append(es, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"}, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"})
			in := pgtest.Enqueue(t, st, es...)
			if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 3, Lease: time.Minute, Queue: "bulk", Kinds: []string{"a"}}); err != nil || len(claims) != 3 {
				t.Fatalf("claim of kind a = %d claims, %v; want acme's 3", len(claims), err)
			}
			var ls []listedFair
			decode(t, limits("-json"), &ls)
			if len(ls) != 3 ||
				ls[0] != (listedFair{Scope: "weight", Name: "bulk", Partition: "", Weight: 2, Active: 2, SetAt: ws[0].SetAt.UTC(), SetBy: operatorName()}) ||
				ls[1] != (listedFair{Scope: "weight", Name: "bulk", Partition: "acme", Weight: 3, Active: 1, SetAt: ws[1].SetAt.UTC(), SetBy: "alice"}) ||
				ls[2] != (listedFair{Scope: "aging", Name: "bulk", After: "1h0m0s", AfterUS: 3_600_000_000}) {
				t.Errorf("limits -json = %+v; want bulk's default 2 serving 2 partitions, acme 3 served, bulk's aging of an hour", ls)
			}
			r := limits()
			tables := strings.Split(strings.TrimSpace(r.stdout), "\n\n")
			if len(tables) != 2 {
				t.Fatalf("limits printed %d tables; want the weights', then the agings':\n%s", len(tables), r.stdout)
			}
			if header := strings.Fields(strings.SplitN(tables[0], "\n", 2)[0]); strings.Join(header, " ") != "SCOPE NAME PARTITION WEIGHT ACTIVE SET AT SET BY" {
				t.Errorf("weights header = %q", header)
			}
			if line := lineWith(tables[0], "(default)"); len(line) != 8 || line[0] != "weight" || line[1] != "bulk" || line[3] != "2" || line[4] != "2" || line[7] != operatorName() {
				t.Errorf("limits prints %q for bulk's default weight; want weight, bulk, (default), 2, 2 served, when, by:\n%s", line, r.stdout)
			}
			if line := lineWith(tables[0], "acme"); len(line) != 8 || line[0] != "weight" || line[3] != "3" || line[4] != "1" || line[7] != "alice" {
				t.Errorf("limits prints %q for acme's weight; want weight, bulk, acme, 3, 1, when, alice:\n%s", line, r.stdout)
			}
			if got := strings.Join(strings.Fields(tables[1]), " "); got != "SCOPE NAME AFTER aging bulk 1h0m0s" {
				t.Errorf("agings table = %q; want bulk's hour under SCOPE NAME AFTER", got)
			}
			if got, want := text("-queue", "bulk", "-partition", "acme", "-weight", "3"), "weight of partition acme in queue bulk set to 3 (was 3); served now"; got != want {
				t.Errorf("limits -queue bulk -partition acme -weight 3 once it is served printed %q; want %q", got, want)
			}

			// list -id: acme's fourth row waits its turn.
			one := func(id int64, args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"list", "-id", strconv.FormatInt(id, 10)}, args...)...)...)
			}
			wantText := "waits its turn in fair queue bulk: partition acme (weight 3) is 3 rows ahead of the partition furthest behind"
			if _, why, _ := strings.Cut(one(in[3].ID).stdout, "why not running"); strings.TrimSpace(why) != wantText {
				t.Errorf("list -id of acme's fourth row: why not running %q; want %q", strings.TrimSpace(why), wantText)
			}
			var js oneRowJSON
			decode(t, one(in[3].ID, "-json"), &js)
			if len(js.Why) != 1 {
				t.Fatalf("list -id -json of acme's fourth row = %+v; want one reason", js)
			}
			if w := js.Why[0]; w.Kind != "fair" || w.Text != wantText || w.Queue != "bulk" || w.Partition != "acme" || w.Weight == nil || *w.Weight != 3 || w.Ahead == nil || *w.Ahead != 3 {
				t.Errorf("list -id -json reason = %+v", w)
			}
			decode(t, one(in[4].ID, "-json"), &js)
			if len(js.Why) != 0 {
				t.Errorf("list -id -json of beta's row, the partition furthest behind = %+v; want no reason", js.Why)
			}

			// The audit, latest first: each change with its partition,
			// or the aging's wait.
			var cs []limitChangeJSON
			decode(t, limits("-changes", "-n", "6", "-json"), &cs)
			type change struct {
				scope, partition string
				old, new         int
				per              string
				by               string
			}
			want := []change{
				{"weight", "acme", 3, 3, "", operatorName()},
				{"aging", "-", 1, 1, "1h0m0s", "bob"},
				{"aging", "-", -1, 1, "10m0s", "bob"},
				{"weight", "", 1, 2, "", operatorName()},
				{"weight", "", -1, 1, "", "alice"},
				{"weight", "acme", -1, 3, "", "alice"},
			}
			if len(cs) != len(want) {
				t.Fatalf("limits -changes -json = %+v; want %d changes", cs, len(want))
			}
			for i, w := range want {
				c := cs[i]
				part := "-"
				if c.Partition != nil {
					part = *c.Partition
				}
				if c.Scope != w.scope || c.Name != "bulk" || part != w.partition || maxOf(c.Old) != w.old || maxOf(c.New) != w.new || c.Per != w.per || c.By != w.by {
					t.Errorf("change %d = %+v (partition %s); want %+v", i, c, part, w)
				}
			}
			r = limits("-changes", "-n", "4")
			if f := lineWith(r.stdout, "(default)"); len(f) != 9 || f[2] != "weight" || f[3] != "bulk" || f[5] != "1" || f[6] != "2" || f[7] != "-" {
				t.Errorf("limits -changes prints %q for the default's change; want when, weight, bulk, (default), 1, 2, no period, by:\n%s", f, r.stdout)
			}
			if f := lineWith(r.stdout, "aging"); len(f) != 9 || f[3] != "bulk" || f[4] != "-" || f[5] != "on" || f[6] != "on" || f[7] != "1h0m0s" || f[8] != "bob" {
				t.Errorf("limits -changes prints %q for the aging's change; want when, aging, bulk, no partition, on, on, 1h0m0s, bob:\n%s", f, r.stdout)
			}
			if header := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0]); strings.Join(header, " ") != "AT SCOPE NAME PARTITION OLD NEW PERIOD BY" {
				t.Errorf("limits -changes header = %q", header)
			}

			// Clears, and clears of nothing.
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"-queue", "bulk", "-partition", "acme", "-clear-weight"}, "cleared the weight of partition acme in queue bulk: it weighs the queue's default"},
				{[]string{"-queue", "bulk", "-partition", "acme", "-clear-weight"}, "partition acme had no weight of its own in queue bulk; nothing changed"},
				{[]string{"-queue", "bulk", "-clear-aging"}, "cleared the priority aging of queue bulk: its events are claimed at their own priority however long they wait"},
				{[]string{"-queue", "bulk", "-clear-aging"}, "queue bulk had no priority aging; nothing changed"},
				{[]string{"-queue", "bulk", "-clear-weight", "-by", "carol"}, "cleared the default weight of queue bulk: it is no longer fair, and its claims take its events in the queue's order; the weights of its partitions stay, unused until a default is set again"},
				{[]string{"-queue", "bulk", "-clear-weight"}, "queue bulk had no default weight (it is not fair); nothing changed"},
			} {
				if got := text(c.args...); got != c.want {
					t.Errorf("limits %v printed %q; want %q", c.args, got, c.want)
				}
			}
			var cl clearFairJSON
			decode(t, limits("-queue", "bulk", "-clear-weight", "-json"), &cl)
			if cl.Scope != "weight" || cl.Name != "bulk" || cl.Partition == nil || *cl.Partition != "" || cl.Cleared {
				t.Errorf("limits -queue bulk -clear-weight -json = %+v; want weight bulk, partition \"\", not cleared", cl)
			}
			cl = clearFairJSON{}
			decode(t, limits("-queue", "bulk", "-clear-aging", "-json"), &cl)
			if cl.Scope != "aging" || cl.Name != "bulk" || cl.Partition != nil || cl.Cleared {
				t.Errorf("limits -queue bulk -clear-aging -json = %+v; want aging bulk, not cleared", cl)
			}
			if ws, err := st.Weights(ctx); err != nil || len(ws) != 0 {
				t.Errorf("stored weights after the clears = %+v, %v; want none", ws, err)
			}
			if got := text(); got != "no limits are set" {
				t.Errorf("limits once everything was cleared printed %q", got)
			}
			decode(t, limits("-changes", "-n", "1", "-json"), &cs)
			if len(cs) != 1 || cs[0].Scope != "weight" || cs[0].By != "carol" || maxOf(cs[0].Old) != 2 || maxOf(cs[0].New) != -1 {
				t.Errorf("limits -changes -n 1 -json = %+v; want carol's clear of the default, 2", cs)
			}
		})
	}
}

// Concurrency limits, rate limits, weights and agings together: four
// tables, in that order.
func TestLimitsListsEveryScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	if _, err := st.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 2}, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopeQueue, Name: "bulk", Max: 10, Per: time.Minute}, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetWeight(ctx, lease.Weight{Queue: "bulk", Weight: 1}, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetAging(ctx, "reports", 90*time.Second, "ops"); err != nil {
		t.Fatal(err)
	}
	r := must(t, exitOK, on(t, st, pgtest.Drivers[0].Name, "limits")...)
	tables := strings.Split(strings.TrimSpace(r.stdout), "\n\n")
	if len(tables) != 4 || !strings.Contains(tables[0], "LIVE/MAX") || !strings.Contains(tables[1], "MAX/PERIOD") ||
		!strings.Contains(tables[2], "WEIGHT") || strings.Join(strings.Fields(tables[3]), " ") != "SCOPE NAME AFTER aging reports 1m30s" {
		t.Errorf("limits with a limit, a rate limit, a weight and an aging printed:\n%s", r.stdout)
	}
}
