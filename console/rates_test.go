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

// Rate limits on the queues page: set by name and from a row's form,
// listed with their starts in the window and, while full, when the next
// start is allowed, in their queue's row as well, with their changes in
// the audit; an event's page shows its cost and the rate limit that holds
// it. Authorize decides them as concurrency limits (ActionSetLimit,
// ActionClearLimit), with Rate set and the rate's Max and Per: the hook
// that only lets admin clear limits keeps alice from clearing a rate
// limit too. Bad input is a 400 that changes nothing.
func TestSetAndClearRateLimits(t *testing.T) {
	var mu sync.Mutex
	var asked []console.Action
	s := newSite(t, console.Options{
		Actions:  true,
		Operator: func(r *http.Request) string { return r.Header.Get("X-User") },
		Authorize: func(r *http.Request, a console.Action) error {
			mu.Lock()
			asked = append(asked, a)
			mu.Unlock()
			if a.Name == console.ActionClearLimit && r.Header.Get("X-User") != "admin" {
				return errors.New("only admin clears limits")
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
	contains(t, p, "Rate limits", "No rate limit is set.", "Set a rate limit", "at most starts per period")
	tok := token(t, p)

	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"sms.send"}, "rate": {"3/1m"}}, "X-User", "alice"))
	contains(t, p, "The rate limit of kind sms.send is 3 starts per 1m0s (was none).", "kind sms.send 0/3 starts per 1m0s now", "by alice")
	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"queue"}, "name": {"default"}, "rate": {" 100/h "}}, "X-User", "alice"))
	contains(t, p, "The rate limit of queue default is 100 starts per 1h0m0s (was none).")
	rls, err := s.store.RateLimits(ctx)
	if err != nil || len(rls) != 2 || rls[0].RateLimit != (lease.RateLimit{Scope: lease.ScopeKind, Name: "sms.send", Max: 3, Per: time.Minute}) ||
		rls[0].SetBy != "alice" || rls[1].RateLimit != (lease.RateLimit{Scope: lease.ScopeQueue, Name: "default", Max: 100, Per: time.Hour}) {
		t.Fatalf("stored rate limits = %+v, %v; want kind sms.send 3 per minute and queue default 100 per hour, by alice", rls, err)
	}

	// Three starts fill sms.send's window; the fourth event waits.
	in := pgtest.Enqueue(t, s.store, lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"},
		lease.Event{Kind: "sms.send", Cost: 2})
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
		t.Fatalf("claim under a rate limit of 3 = %d claims, %v; want 3", len(claims), err)
	}
	p = get("queues", "alice")
	contains(t, p, "kind sms.send 3/3 starts per 1m0s full until ", "queue default 3/100 starts per 1h0m0s now",
		"default running; rate 3/100 starts per 1h0m0s 1 1 3 0 0", "rate:kind sms.send none 3 per 1m0s alice")
	lacks(t, p, "Clear")
	// The row's form carries the rate back as it was set.
	if !strings.Contains(p.body, `<input type="hidden" name="scope" value="kind"><input type="hidden" name="name" value="sms.send"><input name="rate" value="3/1m0s"`) {
		t.Errorf("sms.send's row lacks its set form, with its rate:\n%s", p.body)
	}
	if !strings.Contains(p.body, `href="./events?kind=sms.send&amp;status=READY"`) {
		t.Errorf("sms.send's row does not link its READY events:\n%s", p.body)
	}
	contains(t, get("queues", "admin"), "Clear")

	p = s.get(fmt.Sprintf("events/%d", in[3].ID), http.StatusOK)
	contains(t, p, "Why it is not running held by rate limit kind:sms.send (3/3 starts per 1m0s): it costs 2 starts, which the window has room for at ",
		"or when the limit is raised or cleared ( queues and limits )", "Cost 2 starts under rate limits")
	contains(t, s.get(fmt.Sprintf("events/%d", in[0].ID), http.StatusOK), "Cost 1 start under rate limits")

	// Lowered from the row's form; alice may not clear it, admin may.
	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"sms.send"}, "rate": {"2/1m0s"}}, "X-User", "alice"))
	contains(t, p, "The rate limit of kind sms.send is 2 starts per 1m0s (was 3 per 1m0s). The starts already in its window stay counted.",
		"kind sms.send 3/2 starts per 1m0s full until ")
	p = s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"sms.send"}}, "X-User", "alice")
	if p.status != http.StatusForbidden {
		t.Errorf("alice's clear: status %d, want 403", p.status)
	}
	contains(t, p, "Not allowed: only admin clears limits")
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"sms.send"}}, "X-User", "admin"))
	contains(t, p, "The rate limit of kind sms.send is cleared: workers claim its events as they have room.", "rate:kind sms.send 2 per 1m0s none admin")
	lacks(t, p, "kind sms.send 3/2")
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"sms.send"}}, "X-User", "admin"))
	contains(t, p, "Kind sms.send had no rate limit; nothing changed.")
	if rls, err := s.store.RateLimits(ctx); err != nil || len(rls) != 1 || rls[0].Scope != lease.ScopeQueue {
		t.Errorf("stored rate limits after the clear = %+v, %v; want the queue's only", rls, err)
	}
	cs, err := s.store.LimitChanges(ctx, 10)
	if err != nil || len(cs) != 4 || cs[0].Scope != "rate:kind" || cs[0].By != "admin" || cs[0].Old != 2 || cs[0].New != -1 || cs[0].Per != time.Minute ||
		cs[1].By != "alice" || cs[1].Old != 3 || cs[1].New != 2 {
		t.Errorf("the audit = %+v, %v; want alice's sets, then admin's clear", cs, err)
	}

	bad := []struct {
		path string
		form url.Values
		says string
	}{
		{"rate-limits/set", url.Values{"scope": {"tenant"}, "name": {"acme"}, "rate": {"1/s"}}, `Unknown scope "tenant": a rate limit is of a kind (in every queue), of a queue (of every kind) or of a partition.`},
		{"rate-limits/clear", url.Values{"name": {"x"}}, `Unknown scope ""`},
		{"rate-limits/set", url.Values{"scope": {"kind"}, "name": {""}, "rate": {"1/s"}}, "Not a kind name: kind is empty."},
		{"rate-limits/set", url.Values{"scope": {"kind"}, "name": {"x"}, "rate": {"0/s"}}, `Not a rate: rate "0/s": 0 starts; it must be from 1 to 10000. Write it as at most M starts per PERIOD, M/PERIOD: 100/1m, 5/500ms, 100/s.`},
		{"rate-limits/set", url.Values{"scope": {"queue"}, "name": {"x"}, "rate": {"5/25h"}}, "it must be from 1ms to 24h0m0s"},
		{"rate-limits/set", url.Values{"scope": {"queue"}, "name": {"x"}}, `Not a rate: rate "": write it as M/PERIOD`},
	}
	for _, b := range bad {
		b.form.Set("csrf", tok)
		p := s.post(b.path, b.form, "X-User", "admin")
		if p.status != http.StatusBadRequest {
			t.Errorf("POST %s %v: status %d, want 400", b.path, b.form, p.status)
		}
		contains(t, p, b.says)
	}
	if p := s.post("rate-limits/raise", url.Values{"csrf": {tok}}); p.status != http.StatusNotFound {
		t.Errorf("POST rate-limits/raise: status %d, want 404", p.status)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url("rate-limits/set?scope=kind&name=x&rate=1/s&csrf="+url.QueryEscape(tok)), nil)
	if p := s.do(req); p.status != http.StatusMethodNotAllowed {
		t.Errorf("GET rate-limits/set: status %d, want 405", p.status)
	}
	if p := s.post("rate-limits/set", url.Values{"scope": {"kind"}, "name": {"x"}, "rate": {"1/s"}}); p.status != http.StatusForbidden {
		t.Errorf("set without the token: status %d, want 403", p.status)
	}
	if cs, _ := s.store.LimitChanges(ctx, 10); len(cs) != 4 {
		t.Errorf("refused requests wrote %d changes", len(cs)-4)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, w := range []console.Action{
		{Name: console.ActionSetLimit, Rate: true}, // the form by name
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "sms.send", Max: 3}, Rate: true, Per: time.Minute},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "sms.send"}, Rate: true},   // the row's form
		{Name: console.ActionClearLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "sms.send"}, Rate: true}, // the row's form, and the clear
	} {
		if !slices.Contains(asked, w) {
			t.Errorf("Authorize was never asked about %+v; it was asked about %+v", w, asked)
		}
	}
}

// On a schema from before the rate limits (it lacks their tables), the
// queues page shows the queues and the concurrency limits, and says to
// migrate for the rate limits.
func TestQueuesPageBeforeTheRateLimits(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k", Queue: "bulk"})
	if _, err := s.store.SetLimit(context.Background(), lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 2}, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"rate_shares", "rate_limits"} {
		q := "DROP TABLE " + lease.QuoteIdent(s.store.Schema()) + "." + lease.QuoteIdent(s.store.Table()+"_"+suffix)
		if _, err := s.store.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	p := s.get("queues", http.StatusOK)
	contains(t, p, "bulk running 1 1 0 0 0", "kind k 0/2 live", "Set a limit",
		"This table's schema predates the rate limits: migrate it", "leasework migrate")
	lacks(t, p, "Set a rate limit", "No rate limit is set.")
}
