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

// Partition rate limits on the queues page: a partition's set by name,
// the default of the partitions with a form of its own, listed with their
// starts and the events they set aside (linked to them), the default with
// the starts of every partition under it and its most "each"; an event's
// page says which holds it; their changes are in the audit as
// rate:partition. Authorize sees them as rate limits of scope partition
// (the default with an empty name): the hook that lets only admin change
// the default of the partitions hides its form from alice and refuses
// her set and clear, and lets her set and clear acme's.
func TestSetAndClearPartitionRateLimits(t *testing.T) {
	var mu sync.Mutex
	var asked []console.Action
	s := newSite(t, console.Options{
		Actions:  true,
		Operator: func(r *http.Request) string { return r.Header.Get("X-User") },
		Authorize: func(r *http.Request, a console.Action) error {
			mu.Lock()
			asked = append(asked, a)
			mu.Unlock()
			if a.Limit.Scope == lease.ScopePartition && a.Limit.Name == "" && a.Name != console.ActionView && r.Header.Get("X-User") != "admin" {
				return errors.New("only admin changes the default of the partitions")
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
	contains(t, p, "Set a rate limit", "No rate limit is set.")
	if !strings.Contains(p.body, `<option value="partition">partition</option></select></label>
<label><input name="name" size="20" maxlength="1024"`) || strings.Contains(p.body, `class="rate-partition-default"`) {
		t.Errorf("alice's queues page: want the form by name with a partition scope, and no form for the default of the partitions:\n%s", p.body)
	}
	tok := token(t, p)
	if p := get("queues", "admin"); !strings.Contains(p.body, `class="rate-partition-default"`) {
		t.Errorf("admin's queues page lacks the form for the default rate limit of the partitions:\n%s", p.body)
	}

	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {"acme"}, "rate": {"2/h"}}, "X-User", "alice"))
	contains(t, p, "The rate limit of partition acme is 2 starts per 1h0m0s (was none). The starts already in its window stay counted.",
		"partition acme 0/2 starts per 1h0m0s now 0 ", "by alice")
	p = s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}, "rate": {"1/h"}}, "X-User", "alice")
	if p.status != http.StatusForbidden {
		t.Errorf("alice's set of the default: status %d, want 403", p.status)
	}
	contains(t, p, "Not allowed: only admin changes the default of the partitions")
	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}, "rate": {"1/h"}}, "X-User", "admin"))
	contains(t, p, "The default rate limit of the partitions is 1 start per 1h0m0s each (was none): each partition without a rate limit of its own is held to it, in a window of its own.",
		"partition default 0 recent, 1 each per 1h0m0s per partition 0 ")
	rls, err := s.store.RateLimits(ctx)
	if err != nil || len(rls) != 2 || rls[0].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: "", Max: 1, Per: time.Hour}) ||
		rls[0].SetBy != "admin" || rls[1].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: "acme", Max: 2, Per: time.Hour}) || rls[1].SetBy != "alice" {
		t.Fatalf("stored rate limits = %+v, %v; want the default of the partitions, 1 an hour (by admin), and acme's, 2 an hour (by alice)", rls, err)
	}

	// acme starts 2 and sets 1 aside; beta (the default) starts 1 and
	// sets 1 aside.
	var es []lease.Event
	for _, part := range []string{"acme", "acme", "acme", "beta", "beta"} {
		es = append(es, lease.Event{Kind: "k", Partition: part})
	}
	in := pgtest.Enqueue(t, s.store, es...)
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
		t.Fatalf("claim under the partition rate limits = %d claims, %v; want 3", len(claims), err)
	}
	p = get("queues", "alice")
	contains(t, p, "partition default 1 recent, 1 each per 1h0m0s per partition 1 set aside", "partition acme 2/2 starts per 1h0m0s full until ",
		"rate:partition default none 1 per 1h0m0s admin", "rate:partition acme none 2 per 1h0m0s alice")
	for _, want := range []string{
		`<a href="./events?partition=acme&amp;status=WAITING">1 set aside</a>`,
		`<input type="hidden" name="scope" value="partition"><input type="hidden" name="name" value="acme"><input name="rate" value="2/1h0m0s"`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("acme's row lacks %s:\n%s", want, p.body)
		}
	}
	// The default's row: alice may neither set nor clear it.
	if strings.Contains(p.body, `<input type="hidden" name="scope" value="partition"><input type="hidden" name="name" value=""><input name="rate"`) {
		t.Errorf("alice is shown the default's set form:\n%s", p.body)
	}

	contains(t, s.get(fmt.Sprintf("events/%d", in[2].ID), http.StatusOK), "Status WAITING",
		"held by rate limit partition:acme (2/2 starts per 1h0m0s): the next start is allowed at ")
	contains(t, s.get(fmt.Sprintf("events/%d", in[4].ID), http.StatusOK),
		"held by rate limit partition default (1/1 starts per 1h0m0s in partition beta): the next start is allowed at ")

	// Clears: acme's by alice, the default by admin only.
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {"acme"}}, "X-User", "alice"))
	contains(t, p, "The rate limit of partition acme is cleared: the default rate limit of the partitions applies to it, if one is set; the events it set aside come back as workers claim, as far as the limits left let them.")
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {"acme"}}, "X-User", "alice"))
	contains(t, p, "Partition acme had no rate limit of its own; nothing changed.")
	if p := s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}}, "X-User", "alice"); p.status != http.StatusForbidden {
		t.Errorf("alice's clear of the default: status %d, want 403", p.status)
	}
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}}, "X-User", "admin"))
	contains(t, p, "The default rate limit of the partitions is cleared: those without a rate limit of their own are no longer rate limited; the events it set aside come back as workers claim, as far as the limits left let them.",
		"No rate limit is set.", "rate:partition default 1 per 1h0m0s none admin")
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}}, "X-User", "admin"))
	contains(t, p, "There was no default rate limit of the partitions; nothing changed.")
	cs, err := s.store.LimitChanges(ctx, 10)
	if err != nil || len(cs) != 4 || cs[0].Scope != "rate:partition" || cs[0].Name != "" || cs[0].By != "admin" || cs[0].New != -1 || cs[0].Per != time.Hour ||
		cs[1].Name != "acme" || cs[1].By != "alice" || cs[1].Old != 2 {
		t.Errorf("the audit = %+v, %v; want the sets, acme's clear by alice, the default's by admin", cs, err)
	}

	for _, b := range []struct {
		form url.Values
		says string
	}{
		{url.Values{"scope": {"tenant"}, "name": {"acme"}, "rate": {"1/s"}}, `Unknown scope "tenant": a rate limit is of a kind (in every queue), of a queue (of every kind) or of a partition.`},
		{url.Values{"scope": {"partition"}, "name": {"a\x00b"}, "rate": {"1/s"}}, "Not a partition name: partition"},
		{url.Values{"scope": {"partition"}, "name": {"acme"}, "rate": {"0/s"}}, `Not a rate: rate "0/s": 0 starts`},
	} {
		b.form.Set("csrf", tok)
		p := s.post("rate-limits/set", b.form, "X-User", "admin")
		if p.status != http.StatusBadRequest {
			t.Errorf("POST rate-limits/set %v: status %d, want 400", b.form, p.status)
		}
		contains(t, p, b.says)
	}
	if cs, _ := s.store.LimitChanges(ctx, 10); len(cs) != 4 {
		t.Errorf("refused requests wrote %d changes", len(cs)-4)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, w := range []console.Action{
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition}, Rate: true}, // the default's form
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition, Name: "acme", Max: 2}, Rate: true, Per: time.Hour},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition, Name: "", Max: 1}, Rate: true, Per: time.Hour},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition, Name: "acme"}, Rate: true},   // the row's form
		{Name: console.ActionClearLimit, Limit: lease.Limit{Scope: lease.ScopePartition, Name: "acme"}, Rate: true}, // the row's form, and the clear
		{Name: console.ActionClearLimit, Limit: lease.Limit{Scope: lease.ScopePartition, Name: ""}, Rate: true},
	} {
		if !slices.Contains(asked, w) {
			t.Errorf("Authorize was never asked about %+v; it was asked about %+v", w, asked)
		}
	}
}
