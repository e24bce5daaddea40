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

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Read-only is the default: no page shows a form, and every action's POST
// is refused with 403 and changes nothing, even with a valid-looking form.
func TestReadOnlyByDefault(t *testing.T) {
	s := newSite(t, console.Options{})
	r := failedEvent(t, s.store, lease.Event{Kind: "k", Key: "held"}, "boom")
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k", Key: "held"})
	limit := lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 2}
	if _, err := s.store.SetLimit(context.Background(), limit, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "events", fmt.Sprintf("events/%d", r.ID), "queues", "keys"} {
		p := s.get(path, http.StatusOK)
		contains(t, p, "read-only")
		if strings.Contains(p.body, "<form method=\"post\"") || strings.Contains(p.body, `name="csrf"`) {
			t.Errorf("%s shows an action's form on a read-only console", path)
		}
	}
	form := url.Values{"csrf": {"anything"}, "generation": {fmt.Sprint(r.Generation)}, "queue": {"default"},
		"scope": {"kind"}, "name": {"k"}, "max": {"7"}, "rate": {"1/s"}, "weight": {"2"}, "after": {"1m"}}
	for _, path := range []string{
		fmt.Sprintf("events/%d/requeue", r.ID), fmt.Sprintf("events/%d/discard", r.ID), fmt.Sprintf("events/%d/cancel", r.ID),
		"queues/pause", "queues/resume", "limits/set", "limits/clear", "rate-limits/set", "rate-limits/clear",
		"weights/set", "weights/clear", "aging/set", "aging/clear",
	} {
		p := s.post(path, form)
		if p.status != http.StatusForbidden {
			t.Errorf("POST %s on a read-only console: status %d, want 403", path, p.status)
		}
		contains(t, p, "This console is read-only: actions are disabled.")
	}
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusFailed || got.Generation != r.Generation {
		t.Errorf("after refused actions the event is %s at generation %d; want FAILED at %d", got.Status, got.Generation, r.Generation)
	}
	if qs, _ := s.store.Queues(context.Background()); len(qs) != 1 || !qs[0].Paused.IsZero() {
		t.Errorf("after a refused pause the queues are %+v; want default running", qs)
	}
	if ls, _ := s.store.Limits(context.Background()); len(ls) != 1 || ls[0].Limit != limit {
		t.Errorf("after a refused set and clear the limits are %+v; want %+v", ls, limit)
	}
	if rls, err := s.store.RateLimits(context.Background()); err != nil || len(rls) != 0 {
		t.Errorf("after a refused set of a rate limit the rate limits are %+v, %v; want none", rls, err)
	}
	if ws, err := s.store.Weights(context.Background()); err != nil || len(ws) != 0 {
		t.Errorf("after a refused set of a weight the weights are %+v, %v; want none", ws, err)
	}
	if as, err := s.store.Agings(context.Background()); err != nil || len(as) != 0 {
		t.Errorf("after a refused set of an aging the agings are %v, %v; want none", as, err)
	}
}

// Requeue, from the event's page: the event is READY again with a new
// generation, and the page it lands on says so. Requeueing it again says
// it is not FAILED.
func TestRequeue(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	r := failedEvent(t, s.store, lease.Event{Kind: "mail", EventID: "mail-1"}, "smtp timeout")
	p := s.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK)
	contains(t, p, "FAILED", "smtp timeout", "Requeue", "Discard", "Cancel", "actions enabled")
	tok := token(t, p)

	p = s.follow(s.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}))
	contains(t, p, fmt.Sprintf("Event %d requeued: it is READY, due now", r.ID), fmt.Sprintf("Event %d READY", r.ID))
	got := row(t, s.store, r.ID)
	if got.Status != leasework.StatusReady || got.Generation <= r.Generation || got.Attempt != 0 {
		t.Errorf("after requeue: %s, generation %d (was %d), attempt %d; want READY, a newer generation, attempt 0", got.Status, got.Generation, r.Generation, got.Attempt)
	}
	lacks(t, p, "Requeue back to READY")

	p = s.follow(s.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {tok}, "generation": {fmt.Sprint(got.Generation)}}))
	contains(t, p, fmt.Sprintf("Event %d was not requeued: it is READY, and only a FAILED event can be requeued.", r.ID))
}

// Discard carries the generation the page showed: a discard from a page
// loaded before the event was requeued and failed again is refused, and
// says why; from a fresh page it works, and the key's waiting event goes
// on. The held keys page's forms come back to the held keys.
func TestDiscard(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	ctx := context.Background()
	r := failedEvent(t, s.store, lease.Event{Kind: "sync", Key: "acct-1"}, "first failure")
	next := pgtest.Enqueue(t, s.store, lease.Event{Kind: "sync", Key: "acct-1"})[0]
	stale := s.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK)

	// Meanwhile someone requeues it and it fails again: a new generation.
	if _, err := s.store.Requeue(ctx, lease.RequeueRequest{IDs: []int64{r.ID}, ExtraAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: 60e9})
	if err != nil || len(claims) != 1 || claims[0].ID != r.ID {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := s.store.Write(ctx, lease.Fail(claims[0].Ref(), "second failure")); err != nil {
		t.Fatal(err)
	}
	now := row(t, s.store, r.ID)

	p := s.follow(s.post(fmt.Sprintf("events/%d/discard", r.ID), url.Values{"csrf": {token(t, stale)}, "generation": {fmt.Sprint(r.Generation)}}))
	contains(t, p, fmt.Sprintf("Event %d was not discarded: the page showed it FAILED at generation %d, and it is FAILED at generation %d now.", r.ID, r.Generation, now.Generation),
		"look at it again")
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusFailed {
		t.Errorf("a stale discard changed the event: %s", got.Status)
	}

	keys := s.get("keys", http.StatusOK)
	contains(t, keys, "acct-1", "second failure")
	p = s.follow(s.post(fmt.Sprintf("events/%d/discard", r.ID), url.Values{"csrf": {token(t, keys)}, "generation": {fmt.Sprint(now.Generation)}, "back": {"keys"}}))
	contains(t, p, fmt.Sprintf("Event %d discarded", r.ID), "Held keys", "No key is held")
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusDiscarded {
		t.Errorf("after discard the event is %s; want DISCARDED", got.Status)
	}
	if got := row(t, s.store, next.ID); got.Status != leasework.StatusReady {
		t.Errorf("after the discard the key's next event is %s; want READY", got.Status)
	}

	for _, gen := range []string{"", "x", "0"} {
		p := s.post(fmt.Sprintf("events/%d/discard", r.ID), url.Values{"csrf": {token(t, keys)}, "generation": {gen}})
		if p.status != http.StatusBadRequest {
			t.Errorf("discard with generation %q: status %d, want 400", gen, p.status)
		}
		contains(t, p, "is not a generation")
	}
}

// Cancel ends an unfinished event with the reason given; a finished one
// cannot be cancelled, and the page says so.
func TestCancel(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	id := pgtest.Enqueue(t, s.store, lease.Event{Kind: "report"})[0].ID
	p := s.get(fmt.Sprintf("events/%d", id), http.StatusOK)
	contains(t, p, "Cancel")
	lacks(t, p, "Requeue", "Discard")
	p = s.follow(s.post(fmt.Sprintf("events/%d/cancel", id), url.Values{"csrf": {token(t, p)}, "reason": {"customer closed the account"}}))
	contains(t, p, fmt.Sprintf("Event %d cancelled", id), "DISCARDED", "cancelled: customer closed the account")
	lacks(t, p, "Cancel end it")
	p = s.follow(s.post(fmt.Sprintf("events/%d/cancel", id), url.Values{"csrf": {token(t, s.get("queues", http.StatusOK))}}))
	contains(t, p, fmt.Sprintf("Event %d was not cancelled: it is DISCARDED already.", id))

	p = s.post("events/777777/cancel", url.Values{"csrf": {token(t, s.get("queues", http.StatusOK))}})
	if p.status != http.StatusNotFound {
		t.Errorf("cancel of a missing event: status %d, want 404", p.status)
	}
	contains(t, p, "No event has id 777777; nothing was done.")
}

// Pause and resume from the queues page; pausing twice says it was paused
// already; a bad queue name is a 400.
func TestPauseResume(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k", Queue: "bulk"})
	p := s.get("queues", http.StatusOK)
	contains(t, p, "bulk running", "Pause", "Pause a queue")
	tok := token(t, p)
	p = s.follow(s.post("queues/pause", url.Values{"csrf": {tok}, "queue": {"bulk"}}))
	contains(t, p, "Queue bulk paused: workers claim nothing from it", "bulk paused since", "Resume")
	p = s.follow(s.post("queues/pause", url.Values{"csrf": {tok}, "queue": {"bulk"}}))
	contains(t, p, "Queue bulk was paused already; nothing changed.")
	p = s.follow(s.post("queues/resume", url.Values{"csrf": {tok}, "queue": {"bulk"}}))
	contains(t, p, "Queue bulk resumed", "bulk running")
	p = s.follow(s.post("queues/resume", url.Values{"csrf": {tok}, "queue": {"bulk"}}))
	contains(t, p, "Queue bulk was not paused; nothing changed.")
	p = s.post("queues/pause", url.Values{"csrf": {tok}, "queue": {""}})
	if p.status != http.StatusBadRequest {
		t.Errorf("pause of an empty queue name: %d, want 400", p.status)
	}
	contains(t, p, "Not a queue name: queue is empty.")
}

// Authorize decides every page view and every action; it is told what is
// asked, and a refusal is a 403 page with its reason, with nothing done.
// The forms it would refuse are not shown.
func TestAuthorize(t *testing.T) {
	var mu sync.Mutex
	var asked []console.Action
	s := newSite(t, console.Options{Actions: true, Authorize: func(r *http.Request, a console.Action) error {
		mu.Lock()
		asked = append(asked, a)
		mu.Unlock()
		switch {
		case a.Name == console.ActionView && r.Header.Get("X-User") == "":
			return errors.New("sign in first")
		case a.Name == console.ActionDiscard:
			return errors.New("only the on-call engineer may discard")
		case a.Name == console.ActionRequeue && r.Header.Get("X-User") != "admin":
			return fmt.Errorf("%s may not requeue", r.Header.Get("X-User"))
		case a.Name == console.ActionPause && r.Header.Get("X-User") != "admin":
			return fmt.Errorf("%s may not pause queues", r.Header.Get("X-User"))
		}
		return nil
	}})
	r := failedEvent(t, s.store, lease.Event{Kind: "k"}, "boom")
	path := fmt.Sprintf("events/%d", r.ID)

	p := s.get(path, http.StatusForbidden)
	contains(t, p, "Not allowed: sign in first")
	lacks(t, p, "boom")

	req, _ := http.NewRequest(http.MethodGet, s.url(path), nil)
	req.Header.Set("X-User", "viewer")
	p = s.do(req)
	contains(t, p, "boom", "Cancel")
	lacks(t, p, "Requeue", "Discard")
	tok := token(t, p)

	p = s.post(path+"/requeue", url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}, "X-User", "viewer")
	if p.status != http.StatusForbidden {
		t.Errorf("a refused requeue: status %d, want 403", p.status)
	}
	contains(t, p, "Not allowed: viewer may not requeue")
	p = s.post(path+"/discard", url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}, "X-User", "admin")
	contains(t, p, "Not allowed: only the on-call engineer may discard")
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusFailed {
		t.Errorf("refused actions changed the event: %s", got.Status)
	}
	p = s.post(path+"/requeue", url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}, "X-User", "admin")
	if p.status != http.StatusSeeOther {
		t.Errorf("an allowed requeue: status %d, want 303", p.status)
	}
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusReady {
		t.Errorf("after an allowed requeue the event is %s", got.Status)
	}

	// The form that pauses a queue by name is shown only to whom may pause.
	for user, shown := range map[string]bool{"viewer": false, "admin": true} {
		req, _ := http.NewRequest(http.MethodGet, s.url("queues"), nil)
		req.Header.Set("X-User", user)
		if p := s.do(req); strings.Contains(p.text(), "Pause a queue") != shown {
			t.Errorf("queues page for %s shows the pause form: %v; want %v", user, !shown, shown)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	want := []console.Action{
		{Name: console.ActionView, Page: console.PageEvent, ID: r.ID},
		{Name: console.ActionRequeue, ID: r.ID, Generation: r.Generation},
		{Name: console.ActionDiscard, ID: r.ID, Generation: r.Generation},
	}
	for _, w := range want {
		found := false
		for _, a := range asked {
			found = found || a == w
		}
		if !found {
			t.Errorf("Authorize was never asked about %+v; it was asked about %+v", w, asked)
		}
	}
}

// CSRF: a cross-origin POST is refused, and so is a same-origin one
// without the token or with a wrong one; a same-origin POST with the token
// works; a GET of an action's address does nothing.
func TestCSRF(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	r := failedEvent(t, s.store, lease.Event{Kind: "k"}, "boom")
	path := fmt.Sprintf("events/%d/requeue", r.ID)
	tok := token(t, s.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK))
	host := strings.TrimPrefix(s.srv.URL, "http://")

	refused := []struct {
		name    string
		form    url.Values
		headers []string
		says    string
	}{
		{"cross-site by Sec-Fetch-Site", url.Values{"csrf": {tok}}, []string{"Sec-Fetch-Site", "cross-site"}, "sent from another site"},
		{"cross-origin by Origin", url.Values{"csrf": {tok}}, []string{"Origin", "http://evil.example"}, "sent from another site"},
		{"no token", url.Values{}, []string{"Sec-Fetch-Site", "same-origin"}, "token is missing or wrong"},
		{"wrong token", url.Values{"csrf": {tok + "x"}}, []string{"Origin", "http://" + host}, "token is missing or wrong"},
		{"another console's token", url.Values{"csrf": {"AAAA"}}, nil, "token is missing or wrong"},
	}
	for _, c := range refused {
		p := s.post(path, c.form, c.headers...)
		if p.status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", c.name, p.status)
		}
		contains(t, p, c.says)
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut} {
		req, _ := http.NewRequest(m, s.url(path+"?csrf="+url.QueryEscape(tok)), nil)
		p := s.do(req)
		if p.status != http.StatusMethodNotAllowed || p.header.Get("Allow") != http.MethodPost {
			t.Errorf("%s %s: status %d, Allow %q; want 405, POST", m, path, p.status, p.header.Get("Allow"))
		}
	}
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusFailed {
		t.Fatalf("refused requests changed the event: %s", got.Status)
	}
	p := s.post(path, url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}, "Sec-Fetch-Site", "same-origin", "Origin", "http://"+host)
	if p.status != http.StatusSeeOther {
		t.Errorf("same-origin POST with the token: status %d, want 303\n%s", p.status, p.text())
	}
	if got := row(t, s.store, r.ID); got.Status != leasework.StatusReady {
		t.Errorf("after a good requeue the event is %s", got.Status)
	}
}

// Two consoles sharing a Secret accept each other's forms; the message
// after an action cannot be forged through a link.
func TestSecretAndFlash(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	a := newSite(t, console.Options{Actions: true, Secret: secret})
	b := newSiteOf(t, a.store, console.Options{Actions: true, Secret: secret})
	r := failedEvent(t, a.store, lease.Event{Kind: "k"}, "boom")
	tok := token(t, a.get(fmt.Sprintf("events/%d", r.ID), http.StatusOK))
	p := b.follow(b.post(fmt.Sprintf("events/%d/requeue", r.ID), url.Values{"csrf": {tok}, "generation": {fmt.Sprint(r.Generation)}}))
	contains(t, p, "requeued")

	forged := "events?" + url.Values{"flash": {"Your session expired: sign in at evil.example"}, "fkind": {"ok"}, "fsig": {"abc"}}.Encode()
	p = a.get(forged, http.StatusOK)
	lacks(t, p, "evil.example")

	if _, err := console.New(a.store, console.Options{Secret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "Options.Secret") {
		t.Errorf("New with a 5-byte secret: %v; want an error naming Options.Secret", err)
	}
}

// New checks its options, naming the field.
func TestNewChecksOptions(t *testing.T) {
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for _, c := range []struct {
		opts console.Options
		want string
	}{
		{console.Options{PageSize: -1}, "Options.PageSize"},
		{console.Options{PageSize: console.MaxPageSize + 1}, "Options.PageSize"},
		{console.Options{Timeout: -1}, "Options.Timeout"},
		{console.Options{TrustedOrigins: []string{"not a url"}}, "Options.TrustedOrigins"},
	} {
		if _, err := console.New(st, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", c.opts, err, c.want)
		}
	}
	if _, err := console.New(nil, console.Options{}); err == nil {
		t.Error("New(nil store) did not fail")
	}
}

// Set and clear partition limits from the queues page: a partition's own
// by name, the default of the partitions with its own form (an empty
// name); each says what it did and what a clear leaves, and the page
// lists them. Authorize is asked about the default's form as a partition
// limit of no name.
func TestSetAndClearPartitionLimits(t *testing.T) {
	var mu sync.Mutex
	var asked []console.Action
	s := newSite(t, console.Options{Actions: true, Authorize: func(_ *http.Request, a console.Action) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, a)
		return nil
	}})
	ctx := context.Background()
	p := s.get("queues", http.StatusOK)
	contains(t, p, "Set a limit", "Default of the partitions: at most live attempts each")
	if !strings.Contains(p.body, `<option value="partition">partition</option>`) || !strings.Contains(p.body, `<input type="hidden" name="name" value="">`) {
		t.Errorf("the queues page lacks the partition scope, or the default's form:\n%s", p.body)
	}
	mu.Lock()
	if !slices.Contains(asked, console.Action{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition}}) {
		t.Errorf("Authorize was asked %+v; want the default's form among them, a partition limit of no name", asked)
	}
	mu.Unlock()
	tok := token(t, p)

	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {"acme"}, "max": {"1"}}))
	contains(t, p, "The limit of partition acme is 1 live attempt (was none).", "partition acme 0/1 live 0")
	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {""}, "max": {"3"}}))
	contains(t, p, "The default limit of the partitions is 3 live attempts each (was none): each partition without a limit of its own is held to it.",
		"partition default 0 live, 3 each 0", "partition default none 3")
	ls, err := s.store.Limits(ctx)
	if err != nil || len(ls) != 2 || ls[0].Limit != (lease.Limit{Scope: lease.ScopePartition, Name: "", Max: 3}) ||
		ls[1].Limit != (lease.Limit{Scope: lease.ScopePartition, Name: "acme", Max: 1}) || ls[0].SetBy != "console 127.0.0.1" {
		t.Fatalf("stored limits = %+v, %v; want the default 3 and acme 1, set by the console", ls, err)
	}
	// The rows' forms carry the default's empty name back.
	if !strings.Contains(p.body, `<input type="hidden" name="scope" value="partition"><input type="hidden" name="name" value=""><input name="max" type="number" min="0" max="10000" value="3"`) {
		t.Errorf("the default's row lacks its set form:\n%s", p.body)
	}

	for _, c := range []struct {
		name, says string
	}{
		{"acme", "The limit of partition acme is cleared: the default limit of the partitions applies to it, if one is set; its events set aside come back as workers claim."},
		{"acme", "Partition acme had no limit; nothing changed."},
		{"", "The default limit of the partitions is cleared: those without a limit of their own are no longer limited; their events set aside come back as workers claim."},
		{"", "There was no default limit of the partitions; nothing changed."},
	} {
		p = s.follow(s.post("limits/clear", url.Values{"csrf": {tok}, "scope": {"partition"}, "name": {c.name}}))
		contains(t, p, c.says)
	}
	if ls, err := s.store.Limits(ctx); err != nil || len(ls) != 0 {
		t.Errorf("stored limits after the clears = %+v, %v; want none", ls, err)
	}
}

// Set and clear a limit from the queues page: the store keeps what the
// form asked, recorded as set by the console and the request's address,
// the page it lands on shows it and says what changed; clearing a limit
// that is not there says so and writes nothing to the audit. Bad input is
// a 400 that changes nothing.
func TestSetAndClearLimit(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	ctx := context.Background()
	p := s.get("queues", http.StatusOK)
	contains(t, p, "No limit is set.", "Set a limit")
	tok := token(t, p)

	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"send-email"}, "max": {"5"}}))
	contains(t, p, "The limit of kind send-email is 5 live attempts (was none).", "kind send-email 0/5 live", "by console 127.0.0.1", "Set", "Clear")
	ls, err := s.store.Limits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Limit != (lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 5}) || ls[0].SetBy != "console 127.0.0.1" {
		t.Fatalf("stored limits = %+v, %v; want kind send-email 5, set by console 127.0.0.1", ls, err)
	}

	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"send-email"}, "max": {"0"}}))
	contains(t, p, "The limit of kind send-email is 0 live attempts (was 5). None of its attempts starts until the limit is raised or cleared", "kind send-email 0/0 live held")
	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"queue"}, "name": {"bulk"}, "max": {"2"}}))
	contains(t, p, "The limit of queue bulk is 2 live attempts (was none).", "queue bulk 0/2 live")

	p = s.follow(s.post("limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"send-email"}}))
	contains(t, p, "The limit of kind send-email is cleared")
	lacks(t, p, "kind send-email 0/0 live")
	p = s.follow(s.post("limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"send-email"}}))
	contains(t, p, "Kind send-email had no limit; nothing changed.")
	if ls, err := s.store.Limits(ctx); err != nil || len(ls) != 1 || ls[0].Name != "bulk" {
		t.Errorf("stored limits after the clear = %+v, %v; want queue bulk only", ls, err)
	}
	changes := func() []lease.LimitChange {
		t.Helper()
		cs, err := s.store.LimitChanges(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cs := changes()
	if len(cs) != 4 || cs[0].Old != 0 || cs[0].New != -1 || cs[1].Name != "bulk" || cs[3].Old != -1 || cs[3].New != 5 {
		t.Fatalf("the audit = %+v; want set 5, set 0, set bulk 2, clear, latest first", cs)
	}
	for _, c := range cs {
		if c.By != "console 127.0.0.1" {
			t.Errorf("change %+v was recorded as by %q; want console 127.0.0.1", c, c.By)
		}
	}

	bad := []struct {
		path string
		form url.Values
		says string
	}{
		{"limits/set", url.Values{"scope": {"topic"}, "name": {"x"}, "max": {"1"}}, `Unknown scope "topic": a limit is of a kind (in every queue), of a queue (of every kind) or of a partition.`},
		{"limits/set", url.Values{"scope": {"partition"}, "name": {"a\x00b"}, "max": {"1"}}, "Not a partition name: partition"},
		{"limits/set", url.Values{"scope": {"partition"}, "name": {""}, "max": {"-1"}}, `"-1" is not a limit`},
		{"limits/clear", url.Values{"name": {"x"}}, `Unknown scope ""`},
		{"limits/set", url.Values{"scope": {"kind"}, "name": {""}, "max": {"1"}}, "Not a kind name: kind is empty."},
		{"limits/clear", url.Values{"scope": {"queue"}, "name": {""}}, "Not a queue name: queue is empty."},
		{"limits/set", url.Values{"scope": {"kind"}, "name": {"x"}, "max": {"-1"}}, `"-1" is not a limit: give the most live attempts, a whole number from 0 (none starts) to 10000.`},
		{"limits/set", url.Values{"scope": {"kind"}, "name": {"x"}, "max": {"10001"}}, `"10001" is not a limit`},
		{"limits/set", url.Values{"scope": {"kind"}, "name": {"x"}, "max": {"many"}}, `"many" is not a limit`},
		{"limits/set", url.Values{"scope": {"kind"}, "name": {"x"}}, `"" is not a limit`},
	}
	for _, b := range bad {
		b.form.Set("csrf", tok)
		p := s.post(b.path, b.form)
		if p.status != http.StatusBadRequest {
			t.Errorf("POST %s %v: status %d, want 400", b.path, b.form, p.status)
		}
		contains(t, p, b.says)
	}
	if p := s.post("limits/raise", url.Values{"csrf": {tok}}); p.status != http.StatusNotFound {
		t.Errorf("POST limits/raise: status %d, want 404", p.status)
	}
	// The console's protections: no token, another site, another method.
	form := url.Values{"scope": {"kind"}, "name": {"x"}, "max": {"1"}}
	if p := s.post("limits/set", form); p.status != http.StatusForbidden {
		t.Errorf("set without the token: status %d, want 403", p.status)
	}
	form.Set("csrf", tok)
	if p := s.post("limits/set", form, "Sec-Fetch-Site", "cross-site"); p.status != http.StatusForbidden {
		t.Errorf("set from another site: status %d, want 403", p.status)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url("limits/set?"+form.Encode()), nil)
	if p := s.do(req); p.status != http.StatusMethodNotAllowed {
		t.Errorf("GET limits/set: status %d, want 405", p.status)
	}
	if n := len(changes()); n != 4 {
		t.Errorf("refused requests wrote %d changes", n-4)
	}

	// A name is taken as it is: a kind with white space at its end, set
	// from elsewhere, is changed and cleared by its row's forms.
	if _, err := s.store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "report ", Max: 1}, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, post := range []struct {
		path string
		form url.Values
	}{
		{"limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report "}, "max": {"4"}}},
		{"limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report "}}},
	} {
		s.follow(s.post(post.path, post.form))
	}
	if cs := changes(); len(cs) != 7 || cs[1].Name != "report " || cs[1].New != 4 || cs[0].Name != "report " || cs[0].New != -1 {
		t.Errorf("the audit = %+v; want the kind \"report \" set to 4, then cleared", cs)
	}
	if ls, _ := s.store.Limits(ctx); len(ls) != 1 || ls[0].Name != "bulk" {
		t.Errorf("stored limits = %+v; want queue bulk only", ls)
	}

	// Lowered: the page says what becomes of the attempts past it.
	p = s.follow(s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"queue"}, "name": {"bulk"}, "max": {"1"}}))
	contains(t, p, "The limit of queue bulk is 1 live attempt (was 2). Attempts that held its slots past 1 run on outside it until they end.", "queue bulk 0/1 live")
}

// Options.Operator names who sets or clears a limit, in the audit; and
// Authorize is asked about the limit itself, its Max included, and about
// each form before it is shown.
func TestLimitOperatorAndAuthorize(t *testing.T) {
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
			case a.Name == console.ActionSetLimit && a.Limit.Max > 10:
				return fmt.Errorf("%s may allow at most 10", r.Header.Get("X-User"))
			case a.Name == console.ActionClearLimit && r.Header.Get("X-User") != "admin":
				return errors.New("only admin clears limits")
			}
			return nil
		},
	})
	ctx := context.Background()
	tok := token(t, s.get("queues", http.StatusOK))
	p := s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report"}, "max": {"3"}}, "X-User", "alice")
	if p.status != http.StatusSeeOther {
		t.Fatalf("alice's set: status %d, want 303\n%s", p.status, p.text())
	}
	p = s.post("limits/set", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report"}, "max": {"50"}}, "X-User", "alice")
	if p.status != http.StatusForbidden {
		t.Errorf("a refused set: status %d, want 403", p.status)
	}
	contains(t, p, "Not allowed: alice may allow at most 10")
	p = s.post("limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report"}}, "X-User", "alice")
	contains(t, p, "Not allowed: only admin clears limits")

	req, _ := http.NewRequest(http.MethodGet, s.url("queues"), nil)
	req.Header.Set("X-User", "alice")
	p = s.do(req)
	contains(t, p, "kind report 0/3 live", "by alice", "Set a limit")
	lacks(t, p, "Clear")
	req.Header.Set("X-User", "admin")
	contains(t, s.do(req), "Clear")

	if p := s.post("limits/clear", url.Values{"csrf": {tok}, "scope": {"kind"}, "name": {"report"}}, "X-User", "admin"); p.status != http.StatusSeeOther {
		t.Errorf("admin's clear: status %d, want 303", p.status)
	}
	cs, err := s.store.LimitChanges(ctx, 10)
	if err != nil || len(cs) != 2 || cs[0].By != "admin" || cs[0].New != -1 || cs[1].By != "alice" || cs[1].New != 3 {
		t.Errorf("the audit = %+v, %v; want alice's set to 3, then admin's clear", cs, err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, w := range []console.Action{
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "report", Max: 3}},
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "report", Max: 50}},
		{Name: console.ActionSetLimit}, // the form by name
		{Name: console.ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "report"}},   // the row's form
		{Name: console.ActionClearLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "report"}}, // the row's form, and the clear
	} {
		if !slices.Contains(asked, w) {
			t.Errorf("Authorize was never asked about %+v; it was asked about %+v", w, asked)
		}
	}
}
