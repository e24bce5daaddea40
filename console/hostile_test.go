package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Hostile texts, as an attacker who can enqueue events, or make a handler
// fail with a message of theirs, would write them.
const (
	hScript   = `<script>alert(1)</script>`
	hAttr     = `"'><img src=x onerror=alert(1)>`
	hTextarea = `</textarea><script>alert(2)</script>`
	hURL      = `javascript:alert(3)`
)

// raw is what must never appear unescaped in a page: markup that would
// run, or a link to a script.
var raw = []string{"<script", "<img", "</textarea", `href="javascript:`, `'><`}

// Every value an event carries (event id, kind, key, queue, payload,
// progress, last error, metadata, its steps' names and values, its
// output) appears on every page that shows it as the text it
// is, escaped, never as markup; so do the values of the request (filters,
// ids in the path) and the messages after an action.
func TestHostileValuesAreEscaped(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	queue := `q"'><script>alert(4)</script>`
	ev := lease.Event{
		EventID:  hURL + " " + hScript,
		Kind:     hAttr,
		Key:      hTextarea,
		Queue:    queue,
		Payload:  []byte(hScript + hAttr + hTextarea),
		Metadata: map[string]string{hScript: hAttr, "link": hURL},
	}
	r := failedEvent(t, s.store, ev, hAttr+" "+hScript)
	pgtest.Enqueue(t, s.store, lease.Event{Kind: hAttr, Key: hTextarea, Queue: queue, EventID: hURL + " waiting"})
	if _, err := s.store.PauseQueue(t.Context(), queue); err != nil {
		t.Fatal(err)
	}
	for _, l := range []lease.Limit{{Scope: lease.ScopeKind, Name: hAttr, Max: 3}, {Scope: lease.ScopeQueue, Name: queue, Max: 0}} {
		if _, err := s.store.SetLimit(t.Context(), l, hScript); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.store.SetRateLimit(t.Context(), lease.RateLimit{Scope: lease.ScopeQueue, Name: queue, Max: 5, Per: time.Minute}, hTextarea); err != nil {
		t.Fatal(err)
	}
	for _, w := range []lease.Weight{{Queue: queue, Weight: 2}, {Queue: queue, Partition: hAttr, Weight: 7}} {
		if _, err := s.store.SetWeight(t.Context(), w, hScript); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.store.SetAging(t.Context(), queue, time.Minute, hAttr); err != nil {
		t.Fatal(err)
	}
	// A handler's steps and output: a step named in markup, a value of
	// markup (not even JSON), an output of markup.
	stepped := pgtest.Enqueue(t, s.store, lease.Event{Kind: "stepped"})[0].ID
	claims, err := s.store.Claim(t.Context(), lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"stepped"}})
	if err != nil || len(claims) != 1 || claims[0].ID != stepped {
		t.Fatalf("claim row %d: %+v, %v", stepped, claims, err)
	}
	ref := claims[0].Ref()
	for _, w := range []lease.Write{lease.Step(ref, hScript, []byte(`{"note": "`+hAttr+`"}`)), lease.Step(ref, hAttr, []byte(hTextarea)),
		lease.Output(ref, []byte(hScript+" "+hURL)), lease.Complete(ref)} {
		if _, err := s.store.Write(t.Context(), w); err != nil {
			t.Fatal(err)
		}
	}

	pages := []struct {
		path string
		want []string // texts a person must see, as written
	}{
		{"", []string{hAttr, queue, hTextarea}},
		{"events", []string{hURL, hAttr, "q\"'><script>al"}},
		{"events?" + url.Values{"kind": {hAttr}, "queue": {queue}}.Encode(), []string{hURL}},
		{fmt.Sprintf("events/%d", r.ID), []string{ev.EventID, hAttr, hTextarea, queue, hScript + hAttr + hTextarea, hAttr + " " + hScript,
			hScript + " " + hAttr, "link " + hURL}},
		{"queues", []string{"q\"'><script>alert(4)</", "kind " + hAttr + " 0/3 live", "by " + hScript, "queue q\"'><script>alert(4)</",
			"queue " + queue + " 0/5 starts per 1m0s now", "by " + hTextarea, queue + " default 2 0 partitions", queue + " " + hAttr + " 7 not served",
			"Queue After " + queue + " 1m0s", "weight " + queue + " " + hAttr + " none 7 " + hScript, "aging " + queue + " - after 1m0s " + hAttr}},
		{"keys", []string{hTextarea, hAttr}},
		{fmt.Sprintf("events/%d", stepped), []string{"1 " + hScript + " 1 ", `{"note": "` + hAttr + `"}`, "2 " + hAttr + " 1 ", hTextarea,
			fmt.Sprintf("Output %d bytes. %s %s", len(hScript+" "+hURL), hScript, hURL)}},
	}
	for _, pg := range pages {
		p := s.get(pg.path, http.StatusOK)
		noMarkup(t, p)
		contains(t, p, pg.want...)
	}

	// The request's own values, on error pages.
	for path, says := range map[string]string{
		"events?status=" + url.QueryEscape(hScript): hScript,
		"events?after=" + url.QueryEscape(hAttr):    hAttr,
		"events/" + url.PathEscape(hScript):         hScript,
	} {
		p := s.get(path, http.StatusBadRequest)
		noMarkup(t, p)
		contains(t, p, says)
	}

	// Messages after an action that name a hostile queue, and the queue
	// page's forms that carry it back.
	p := s.get("queues", http.StatusOK)
	p = s.follow(s.post("queues/resume", url.Values{"csrf": {token(t, p)}, "queue": {queue}}))
	noMarkup(t, p)
	contains(t, p, "Queue "+queue+" resumed")
	p = s.follow(s.post("queues/pause", url.Values{"csrf": {token(t, p)}, "queue": {hTextarea}}))
	noMarkup(t, p)
	contains(t, p, "Queue "+hTextarea+" paused")

	// The limits' forms carry a hostile kind back, and the message names it.
	p = s.follow(s.post("limits/set", url.Values{"csrf": {token(t, p)}, "scope": {"kind"}, "name": {hTextarea}, "max": {"1"}}))
	noMarkup(t, p)
	contains(t, p, "The limit of kind "+hTextarea+" is 1 live attempt (was none).")
	p = s.follow(s.post("limits/clear", url.Values{"csrf": {token(t, p)}, "scope": {"kind"}, "name": {hAttr}}))
	noMarkup(t, p)
	contains(t, p, "The limit of kind "+hAttr+" is cleared")
	p = s.follow(s.post("rate-limits/set", url.Values{"csrf": {token(t, p)}, "scope": {"kind"}, "name": {hTextarea}, "rate": {"1/s"}}))
	noMarkup(t, p)
	contains(t, p, "The rate limit of kind "+hTextarea+" is 1 start per 1s (was none).")
	p = s.follow(s.post("rate-limits/clear", url.Values{"csrf": {token(t, p)}, "scope": {"queue"}, "name": {queue}}))
	noMarkup(t, p)
	contains(t, p, "The rate limit of queue "+queue+" is cleared")

	// So do the weights' and agings' forms.
	p = s.follow(s.post("weights/set", url.Values{"csrf": {token(t, p)}, "queue": {queue}, "partition": {hTextarea}, "weight": {"4"}}))
	noMarkup(t, p)
	contains(t, p, "The weight of partition "+hTextarea+" in queue "+queue+" is 4 (was none).", queue+" "+hTextarea+" 4 not served")
	p = s.follow(s.post("weights/clear", url.Values{"csrf": {token(t, p)}, "queue": {queue}, "partition": {hAttr}}))
	noMarkup(t, p)
	contains(t, p, "The weight of partition "+hAttr+" in queue "+queue+" is cleared")
	p = s.follow(s.post("aging/set", url.Values{"csrf": {token(t, p)}, "queue": {hTextarea}, "after": {"90s"}}))
	noMarkup(t, p)
	contains(t, p, "The priority aging of queue "+hTextarea+" is 1m30s (was none)")
	p = s.follow(s.post("aging/clear", url.Values{"csrf": {token(t, p)}, "queue": {queue}}))
	noMarkup(t, p)
	contains(t, p, "The priority aging of queue "+queue+" is cleared")

	// The hook's refusal, whatever its text.
	h := newSiteOf(t, s.store, console.Options{Authorize: func(*http.Request, console.Action) error {
		return fmt.Errorf("denied %s", hAttr)
	}})
	p = h.get("", http.StatusForbidden)
	noMarkup(t, p)
	contains(t, p, "Not allowed: denied "+hAttr)
}

// noMarkup fails the test if the page holds any hostile markup unescaped.
func noMarkup(t *testing.T, p page) {
	t.Helper()
	for _, bad := range raw {
		if strings.Contains(p.body, bad) {
			i := strings.Index(p.body, bad)
			t.Errorf("%s has %q unescaped: …%s…", p.url, bad, p.body[max(0, i-80):min(len(p.body), i+80)])
		}
	}
}
