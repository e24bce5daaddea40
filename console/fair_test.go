package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Weights and priority aging on the queues page: set by name (a
// partition's weight in a queue not yet fair says so; the default makes
// it fair) and from a row's form, listed with the partitions served now,
// in their queue's row as well, with their changes in the audit; an
// event's page says when its partition waits its turn. Authorize decides
// them as changes of the queue's limits (ActionSetLimit,
// ActionClearLimit, Limit of scope queue), with Weight and Partition, or
// Aging and Per, set: the hook that only lets admin clear limits keeps
// alice from clearing a weight or an aging, and the one that refuses
// changes of queue locked refuses its weights. Bad input is a 400 that
// changes nothing.
func TestSetAndClearWeightsAndAging(t *testing.T) {
	var mu sync.Mutex
	var asked []console.Action
	s := newSite(t, console.Options{
		Actions:  true,
		Operator: func(r *http.Request) string { return r.Header.Get("X-User") },
		Authorize: func(r *http.Request, a console.Action) error {
			mu.Lock()
			asked = append(asked, a)
			mu.Unlock()
			switch {
			case a.Name == console.ActionClearLimit && r.Header.Get("X-User") != "admin":
				return errors.New("only admin clears limits")
			case a.Name == console.ActionSetLimit && a.Limit.Scope == lease.ScopeQueue && a.Limit.Name == "locked":
				return errors.New("queue locked keeps its limits")
			}
			return nil
		},
	})
	ctx := context.Background()
	get := func(path, user string) page {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.url(path), nil)
		req.Header.Set("X-User", user)
		return s.do(req)
	}
	p := get("queues", "alice")
	contains(t, p, "Fair queues", "No queue is fair.", "Make a queue fair, or weigh a partition", "Priority aging", "No queue ages its events' priority.")
	tok := token(t, p)

	p = s.follow(s.post("weights/set", url.Values{"csrf": {tok}, "queue": {"bulk"}, "partition": {"acme"}, "weight": {"3"}}, "X-User", "alice"))
	contains(t, p, "The weight of partition acme in queue bulk is 3 (was none). Queue bulk is not fair until its default weight is set.")
	p = s.follow(s.post("weights/set", url.Values{"csrf": {tok}, "queue": {"bulk"}, "weight": {" 1 "}}, "X-User", "alice"))
	contains(t, p, "The default weight of queue bulk is 1 (was none): the queue is fair; its claims take its partitions' events in proportion to their weights, 1 for a partition without one of its own.")
	p = s.follow(s.post("aging/set", url.Values{"csrf": {tok}, "queue": {"bulk"}, "after": {" 10m "}}, "X-User", "alice"))
	contains(t, p, "The priority aging of queue bulk is 10m0s (was none): a due event that has waited longer is claimed as one priority level higher.")
	ws, err := s.store.Weights(ctx)
	if err != nil || len(ws) != 2 || ws[0].Weight != (lease.Weight{Queue: "bulk", Weight: 1}) || ws[0].SetBy != "alice" ||
		ws[1].Weight != (lease.Weight{Queue: "bulk", Partition: "acme", Weight: 3}) {
		t.Fatalf("stored weights = %+v, %v; want bulk's default 1 and acme 3, by alice", ws, err)
	}
	if as, err := s.store.Agings(ctx); err != nil || len(as) != 1 || as["bulk"] != 10*time.Minute {
		t.Fatalf("stored agings = %v, %v; want bulk's, 10 minutes", as, err)
	}

	// A claim of kind a alone takes acme's first 3 rows: both partitions
	// are served, acme 3 rows ahead of beta.
	var es []lease.Event
	for range 4 {
		es = append(es, lease.Event{Kind: "a", Queue: "bulk", Partition: "acme"})
	}
	es = append(es, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"}, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"})
	in := pgtest.Enqueue(t, s.store, es...)
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 3, Lease: time.Minute, Queue: "bulk", Kinds: []string{"a"}}); err != nil || len(claims) != 3 {
		t.Fatalf("claim of kind a = %d claims, %v; want acme's 3", len(claims), err)
	}
	p = get("queues", "alice")
	contains(t, p, "bulk running; fair, 2 partitions served; aging after 10m0s 3 3 3 0 0",
		"bulk default 1 2 partitions", "bulk acme 3 served", "Queue After bulk 10m0s",
		"weight bulk acme none 3 alice", "weight bulk default none 1 alice", "aging bulk - after 10m0s alice")
	lacks(t, p, "Clear", "No queue is fair.")
	// The rows' forms carry the weight and the wait back as they are.
	for _, form := range []string{
		`<input type="hidden" name="queue" value="bulk"><input type="hidden" name="partition" value="acme"><input name="weight" type="number" min="1" max="1000" value="3"`,
		`<input type="hidden" name="queue" value="bulk"><input type="hidden" name="partition" value=""><input name="weight" type="number" min="1" max="1000" value="1"`,
		`<input type="hidden" name="queue" value="bulk"><input name="after" value="10m0s"`,
		`href="./events?queue=bulk&amp;partition=acme&amp;status=READY"`,
	} {
		if !strings.Contains(p.body, form) {
			t.Errorf("the queues page lacks %s:\n%s", form, p.body)
		}
	}
	contains(t, get("queues", "admin"), "Clear")

	p = s.get(fmt.Sprintf("events/%d", in[3].ID), http.StatusOK)
	contains(t, p, "Why it is not running waits its turn in fair queue bulk: partition acme (weight 3) is 3 rows ahead of the partition furthest behind ( queues and limits )")
	contains(t, s.get(fmt.Sprintf("events/%d", in[4].ID), http.StatusOK), "Why it is not running Nothing holds it back")

	// Changed from the rows' forms; alice may not clear, nor change the
	// weights of queue locked; admin may clear.
	p = s.follow(s.post("weights/set", url.Values{"csrf": {tok}, "queue": {"bulk"}, "partition": {""}, "weight": {"2"}}, "X-User", "alice"))
	contains(t, p, "The default weight of queue bulk is 2 (was 1).", "bulk default 2 2 partitions")
	p = s.follow(s.post("aging/set", url.Values{"csrf": {tok}, "queue": {"bulk"}, "after": {"1h"}}, "X-User", "alice"))
	contains(t, p, "The priority aging of queue bulk is 1h0m0s (was 10m0s)", "Queue After bulk 1h0m0s")
	for _, refused := range []struct {
		path string
		form url.Values
		says string
	}{
		{"weights/clear", url.Values{"queue": {"bulk"}, "partition": {"acme"}}, "Not allowed: only admin clears limits"},
		{"aging/clear", url.Values{"queue": {"bulk"}}, "Not allowed: only admin clears limits"},
		{"weights/set", url.Values{"queue": {"locked"}, "weight": {"1"}}, "Not allowed: queue locked keeps its limits"},
		{"aging/set", url.Values{"queue": {"locked"}, "after": {"1m"}}, "Not allowed: queue locked keeps its limits"},
	} {
		refused.form.Set("csrf", tok)
		p := s.post(refused.path, refused.form, "X-User", "alice")
		if p.status != http.StatusForbidden {
			t.Errorf("alice's POST %s %v: status %d, want 403", refused.path, refused.form, p.status)
		}
		contains(t, p, refused.says)
	}
	for _, c := range []struct {
		path string
		form url.Values
		says string
	}{
		{"weights/clear", url.Values{"queue": {"bulk"}, "partition": {"acme"}}, "The weight of partition acme in queue bulk is cleared: it weighs the queue's default."},
		{"weights/clear", url.Values{"queue": {"bulk"}, "partition": {"acme"}}, "Partition acme had no weight of its own in queue bulk; nothing changed."},
		{"aging/clear", url.Values{"queue": {"bulk"}}, "The priority aging of queue bulk is cleared: its events are claimed at their own priority however long they wait."},
		{"aging/clear", url.Values{"queue": {"bulk"}}, "Queue bulk had no priority aging; nothing changed."},
		{"weights/clear", url.Values{"queue": {"bulk"}, "partition": {""}}, "The default weight of queue bulk is cleared: it is no longer fair, and its claims take its events in the queue's order; the weights of its partitions stay, unused until a default is set again."},
		{"weights/clear", url.Values{"queue": {"bulk"}}, "Queue bulk had no default weight (it is not fair); nothing changed."},
	} {
		c.form.Set("csrf", tok)
		contains(t, s.follow(s.post(c.path, c.form, "X-User", "admin")), c.says)
	}
	if ws, err := s.store.Weights(ctx); err != nil || len(ws) != 0 {
		t.Errorf("stored weights after the clears = %+v, %v; want none", ws, err)
	}
	if as, err := s.store.Agings(ctx); err != nil || len(as) != 0 {
		t.Errorf("stored agings after the clears = %v, %v; want none", as, err)
	}
	cs, err := s.store.LimitChanges(ctx, 20)
	if err != nil || len(cs) != 8 || cs[0].Scope != "weight" || cs[0].Partition != "" || cs[0].Old != 2 || cs[0].New != -1 || cs[0].By != "admin" ||
		cs[1].Scope != "aging" || cs[1].Per != time.Hour || cs[1].By != "admin" || cs[2].Partition != "acme" || cs[2].Old != 3 || cs[2].New != -1 {
		t.Errorf("the audit = %+v, %v; want alice's 5 changes, then admin's 3 clears", cs, err)
	}

	bad := []struct {
		path string
		form url.Values
		says string
	}{
		{"weights/set", url.Values{"queue": {""}, "weight": {"1"}}, "Not a queue name: queue is empty."},
		{"weights/set", url.Values{"queue": {"bulk"}, "partition": {"a\x00b"}, "weight": {"1"}}, "Not a partition name: partition"},
		{"weights/set", url.Values{"queue": {"bulk"}, "weight": {"0"}}, `"0" is not a weight: give a whole number from 1 to 1000.`},
		{"weights/set", url.Values{"queue": {"bulk"}, "weight": {"1001"}}, `"1001" is not a weight`},
		{"weights/set", url.Values{"queue": {"bulk"}}, `"" is not a weight`},
		{"weights/clear", url.Values{"partition": {"acme"}}, "Not a queue name: queue is empty."},
		{"aging/set", url.Values{"queue": {"bulk"}, "after": {"soon"}}, `"soon" is not a wait: give a duration from 1ms to 8760h0m0s, in whole microseconds, such as 10m or 1h30m.`},
		{"aging/set", url.Values{"queue": {"bulk"}, "after": {"0s"}}, `"0s" is not a wait`},
		{"aging/set", url.Values{"queue": {"bulk"}, "after": {"1.0000005s"}}, `"1.0000005s" is not a wait`},
		{"aging/clear", url.Values{"queue": {"a\x00b"}}, "Not a queue name: queue"},
	}
	for _, b := range bad {
		b.form.Set("csrf", tok)
		p := s.post(b.path, b.form, "X-User", "admin")
		if p.status != http.StatusBadRequest {
			t.Errorf("POST %s %v: status %d, want 400", b.path, b.form, p.status)
		}
		contains(t, p, b.says)
	}
	for _, path := range []string{"weights/raise", "aging/raise"} {
		if p := s.post(path, url.Values{"csrf": {tok}}); p.status != http.StatusNotFound {
			t.Errorf("POST %s: status %d, want 404", path, p.status)
		}
	}
	for _, path := range []string{"weights/set?queue=bulk&weight=1&csrf=", "aging/set?queue=bulk&after=1m&csrf="} {
		req, _ := http.NewRequest(http.MethodGet, s.url(path+url.QueryEscape(tok)), nil)
		if p := s.do(req); p.status != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: status %d, want 405", path, p.status)
		}
	}
	if p := s.post("weights/set", url.Values{"queue": {"bulk"}, "weight": {"1"}}); p.status != http.StatusForbidden {
		t.Errorf("set a weight without the token: status %d, want 403", p.status)
	}
	if p := s.post("aging/set", url.Values{"queue": {"bulk"}, "after": {"1m"}}, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); p.status != http.StatusForbidden {
		t.Errorf("set an aging from another site: status %d, want 403", p.status)
	}
	if cs, _ := s.store.LimitChanges(ctx, 20); len(cs) != 8 {
		t.Errorf("refused requests wrote %d changes", len(cs)-8)
	}

	mu.Lock()
	defer mu.Unlock()
	bulk := lease.Limit{Scope: lease.ScopeQueue, Name: "bulk"}
	for _, w := range []console.Action{
		{Name: console.ActionSetLimit, Weight: true}, // the forms by name
		{Name: console.ActionSetLimit, Aging: true},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeQueue, Name: "bulk", Max: 3}, Weight: true, Partition: "acme"},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeQueue, Name: "bulk", Max: 1}, Weight: true},
		{Name: console.ActionSetLimit, Limit: bulk, Weight: true, Partition: "acme"}, // the row's forms
		{Name: console.ActionClearLimit, Limit: bulk, Weight: true},
		{Name: console.ActionSetLimit, Limit: bulk, Aging: true, Per: 10 * time.Minute},
		{Name: console.ActionSetLimit, Limit: bulk, Aging: true},
		{Name: console.ActionClearLimit, Limit: bulk, Aging: true},
	} {
		if !slices.Contains(asked, w) {
			t.Errorf("Authorize was never asked about %+v; it was asked about %+v", w, asked)
		}
	}
}

// On a schema from before fair scheduling (it lacks its tables), the
// queues page shows the queues and the limits, and says to migrate for
// the weights and agings.
func TestQueuesPageBeforeFairScheduling(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k", Queue: "bulk"})
	if _, err := s.store.SetLimit(context.Background(), lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 2}, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"fair_weights", "fair_keys", "fair_arrivals", "queue_aging"} {
		q := "DROP TABLE " + lease.QuoteIdent(s.store.Schema()) + "." + lease.QuoteIdent(s.store.Table()+"_"+suffix)
		if _, err := s.store.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	p := s.get("queues", http.StatusOK)
	contains(t, p, "bulk running 1 1 0 0 0", "kind k 0/2 live", "Set a limit", "Set a rate limit",
		"This table's schema predates fair scheduling and priority aging: migrate it", "leasework migrate")
	lacks(t, p, "Make a queue fair", "No queue is fair.", "No queue ages")
}
