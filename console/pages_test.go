package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The overview shows the rows per status, the figures of the table, the
// paused queues, the held keys, the last hour's chart and the rows per
// queue, kind and status, each count a link to the events it counts.
func TestOverview(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s.store,
		lease.Event{Kind: "mail"}, lease.Event{Kind: "mail"},
		lease.Event{Kind: "sms", Queue: "bulk"},
	)
	failedEvent(t, s.store, lease.Event{Kind: "invoice", Key: "customer-7"}, "card declined")
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "invoice", Key: "customer-7"})
	claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"mail"}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := s.store.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.PauseQueue(ctx, "bulk"); err != nil {
		t.Fatal(err)
	}

	p := s.get("", http.StatusOK)
	contains(t, p,
		"2 READY", "1 WAITING", "0 INPROGRESS", "1 DONE", "1 FAILED", "0 DISCARDED",
		"Eligible now 2", "Expired claims 0", "Held keys 1", "Paused queues bulk",
		"In the last hour: 1 DONE, 1 FAILED",
		"key customer-7", "1 waiting",
		"minute (UTC)", "events per minute",
	)
	// The table of queues and kinds: one line per queue and kind.
	txt := p.text()
	// Columns: READY WAITING INPROGRESS DONE FAILED DISCARDED.
	for _, line := range []string{"bulk sms 1 0 0 0 0 0", "default invoice 0 1 0 0 1 0", "default mail 1 0 0 1 0 0"} {
		if !strings.Contains(txt, line) {
			t.Errorf("the overview's table lacks the line %q:\n%s", line, txt)
		}
	}
	for _, link := range []string{`href="./events?status=FAILED"`, `href="./events?queue=default&amp;kind=mail&amp;status=DONE"`, `href="./keys"`} {
		if !strings.Contains(p.body, link) {
			t.Errorf("the overview has no link %s", link)
		}
	}
	if !strings.Contains(p.body, "<svg") || !strings.Contains(p.body, `class="done"`) || !strings.Contains(p.body, `class="failed"`) {
		t.Errorf("the overview has no chart with a DONE and a FAILED bar:\n%s", p.body)
	}
	// The stylesheet is served from the console itself.
	css := s.get("static/console.css", http.StatusOK)
	if ct := css.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/css") || !strings.Contains(css.body, ".flash") {
		t.Errorf("static/console.css: %s, %d bytes", ct, len(css.body))
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q does not forbid scripts", csp)
	}
}

// An expired claim, and the age of the oldest eligible row, are shown.
func TestOverviewAges(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	pgtest.EnqueueN(t, s.store, 2, "k")
	if _, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Fixtures: the claim's lease expired two minutes ago; the other row
	// has been due for an hour.
	for _, q := range []string{
		"UPDATE %s SET lease_until = statement_timestamp() - interval '2 minutes' WHERE status = 'INPROGRESS'",
		"UPDATE %s SET next_attempt_at = statement_timestamp() - interval '1 hour' WHERE status = 'READY'",
	} {
		if _, err := s.store.DB().ExecContext(ctx, fmt.Sprintf(q, s.store.QualifiedTable())); err != nil {
			t.Fatal(err)
		}
	}
	p := s.get("", http.StatusOK)
	contains(t, p, "Expired claims 1", "Oldest eligible age 1h0m")
}

// The events list filters by status, kind and queue, and pages: a "Next
// page" link while there are more, which keeps the filters.
func TestEventsListFiltersAndPages(t *testing.T) {
	s := newSite(t, console.Options{PageSize: 2})
	failedEvent(t, s.store, lease.Event{Kind: "mail", EventID: "mail-failed"}, "smtp: 550 no such user")
	ids := []int64{}
	for i := range 5 {
		ids = append(ids, pgtest.Enqueue(t, s.store, lease.Event{Kind: "mail", EventID: fmt.Sprintf("mail-%d", i)})[0].ID)
	}
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "sms", EventID: "sms-0", Queue: "bulk"})

	p := s.get("events?kind=mail&status=READY", http.StatusOK)
	contains(t, p, "mail-0", "mail-1", "Next page")
	lacks(t, p, "mail-2", "sms-0", "mail-failed", "First page")
	// Follow the pages as a person clicks "Next page".
	seen := []string{}
	for range 5 {
		for i := range 5 {
			if strings.Contains(p.text(), fmt.Sprintf("mail-%d ", i)) {
				seen = append(seen, fmt.Sprintf("mail-%d", i))
			}
		}
		next := nextLink(p)
		if next == "" {
			break
		}
		if !strings.Contains(next, "kind=mail") || !strings.Contains(next, "status=READY") {
			t.Errorf("the next page's link %q drops the filters", next)
		}
		p = s.get("events?"+strings.SplitN(next, "?", 2)[1], http.StatusOK)
		contains(t, p, "First page")
	}
	if strings.Join(seen, ",") != "mail-0,mail-1,mail-2,mail-3,mail-4" {
		t.Errorf("paging through READY mail showed %v; want mail-0 to mail-4, once each", seen)
	}

	p = s.get("events?status=FAILED", http.StatusOK)
	contains(t, p, "mail-failed", "FAILED", "smtp: 550 no such user", "1/1")
	lacks(t, p, "mail-0", "Next page")
	p = s.get("events?queue=bulk", http.StatusOK)
	contains(t, p, "sms-0")
	lacks(t, p, "mail-")
	p = s.get("events?kind=nothing", http.StatusOK)
	contains(t, p, "No events match these filters")
	p = s.get(fmt.Sprintf("events?after=%d", ids[4]), http.StatusOK)
	contains(t, p, "sms-0")
	lacks(t, p, "mail-")
}

// nextLink returns the address of a page's "Next page" link, or "".
func nextLink(p page) string {
	before, _, ok := strings.Cut(p.body, `rel="next"`)
	if !ok {
		return ""
	}
	i := strings.LastIndex(before, `href="`)
	href := before[i+len(`href="`):]
	href, _, _ = strings.Cut(href, `"`)
	return strings.ReplaceAll(href, "&amp;", "&")
}

// An event's page shows every field of its row and a preview of its
// payload: text as text, other bytes in hex, and says when it cut them.
func TestEventPage(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	ev := pgtest.Enqueue(t, s.store, lease.Event{
		Kind: "invoice", EventID: "inv-2024-001", Key: "customer-7", Queue: "billing", Priority: 3,
		Payload: []byte(`{"amount": 42, "currency": "EUR"}`), MaxAttempts: 5,
		Metadata: map[string]string{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	})[0]
	claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "billing", Worker: "worker-a"})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := s.store.Write(ctx, lease.Progress(claims[0].Ref(), []byte("page 3 of 9"))); err != nil {
		t.Fatal(err)
	}
	p := s.get(fmt.Sprintf("events/%d", ev.ID), http.StatusOK)
	contains(t, p,
		fmt.Sprintf("Event %d INPROGRESS", ev.ID),
		"Event ID inv-2024-001", "Kind invoice", "Queue billing", "Priority 3", "Key customer-7",
		"Generation 1", "Attempt 1 of 5", "Worker worker-a",
		`{"amount": 42, "currency": "EUR"}`, "33 bytes",
		"page 3 of 9", "Last error none",
		"Metadata tenant acme traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	)
	lacks(t, p, "Lease until -", "truncated", "Requeue", "Cancel")
	contains(t, p, "Why it is not running Nothing holds it back: it runs while its lease does (until "+
		claims[0].LeaseUntil.UTC().Format("2006-01-02 15:04:05Z07:00")+", by the database clock)")

	big := strings.Repeat("é", console.PreviewBytes) // 2 bytes each: twice the cap
	binary := []byte{0x00, 0x01, 0xff, 0xfe, 'a', 'b'}
	enq := pgtest.Enqueue(t, s.store,
		lease.Event{Kind: "big", Payload: []byte(big)},
		lease.Event{Kind: "bin", Payload: binary},
		lease.Event{Kind: "empty"},
	)
	p = s.get(fmt.Sprintf("events/%d", enq[0].ID), http.StatusOK)
	contains(t, p, fmt.Sprintf("%d bytes; the first %d shown (truncated)", len(big), console.PreviewBytes), strings.Repeat("é", 100))
	if n := strings.Count(p.body, "é"); n != console.PreviewBytes/2 {
		t.Errorf("the preview shows %d characters of the payload; want %d (the cap, on a character boundary)", n, console.PreviewBytes/2)
	}
	p = s.get(fmt.Sprintf("events/%d", enq[1].ID), http.StatusOK)
	contains(t, p, "6 bytes, not text: shown in hex", "00 01 ff fe 61 62")
	p = s.get(fmt.Sprintf("events/%d", enq[2].ID), http.StatusOK)
	contains(t, p, "Payload empty", "Metadata none")
}

// An event's page lists its steps in the order recorded, each with the
// generation that recorded it, when, its size and a preview of its value
// (cut at StepPreviewBytes, bytes that are not text in hex), then its
// output; an event without them says it has no steps and shows no output.
func TestEventPageSteps(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	ev := pgtest.Enqueue(t, s.store, lease.Event{Kind: "order", EventID: "order-1"}, lease.Event{Kind: "report", EventID: "report-1"})
	claim := func() leasework.Claim {
		t.Helper()
		claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"order"}})
		if err != nil || len(claims) != 1 || claims[0].ID != ev[0].ID {
			t.Fatalf("claim: %+v, %v; want row %d", claims, err, ev[0].ID)
		}
		return claims[0]
	}
	write := func(ws ...lease.Write) {
		t.Helper()
		for _, w := range ws {
			if _, err := s.store.Write(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Generation 1 reserves, and gives the claim back; generation 2
	// charges, records a receipt that is not text, and its output.
	long := `{"items": "` + strings.Repeat("x", console.StepPreviewBytes) + `"}`
	c1 := claim()
	write(lease.Step(c1.Ref(), "reserve", []byte(`{"sku":"x"}`)), lease.Release(c1.Ref()))
	c2 := claim()
	write(lease.Step(c2.Ref(), "charge", []byte(long)), lease.Step(c2.Ref(), "receipt", []byte{0x00, 0x01, 0xff}),
		lease.Output(c2.Ref(), []byte(`{"order": 42}`)), lease.Complete(c2.Ref()))

	r := row(t, s.store, ev[0].ID)
	if len(r.Steps) != 3 {
		t.Fatalf("row %d has steps %+v; want 3", r.ID, r.Steps)
	}
	p := s.get(fmt.Sprintf("events/%d", ev[0].ID), http.StatusOK)
	at := func(i int) string { return r.Steps[i].At.UTC().Format("2006-01-02 15:04:05Z07:00") }
	contains(t, p,
		"Steps 3 steps, in the order recorded. # Name Generation Recorded Size Value "+
			"1 reserve 1 "+at(0)+` 11 bytes {"sku":"x"} `+
			fmt.Sprintf("2 charge 2 %s %d bytes %s the first %d bytes shown (truncated) ", at(1), len(long), long[:console.StepPreviewBytes], console.StepPreviewBytes)+
			"3 receipt 2 "+at(2)+" 3 bytes 00000000 00 01 ff |...| not text: shown in hex",
		`Output 13 bytes. {"order": 42}`,
	)

	p = s.get(fmt.Sprintf("events/%d", ev[1].ID), http.StatusOK)
	contains(t, p, "Steps no steps recorded")
	lacks(t, p, "Output")

	// Past StepsShown, the page says how many it shows.
	const n = console.StepsShown + 5
	if _, err := s.store.DB().ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET steps = (
		SELECT jsonb_object_agg('s' || lpad(i::text, 3, '0'), jsonb_build_object('g', 1, 'at', statement_timestamp() + i * interval '1 second', 'v', encode(convert_to(i::text, 'UTF8'), 'base64')))
		FROM generate_series(1, %d) AS i) WHERE id = $1`, s.store.QualifiedTable(), n), ev[1].ID); err != nil {
		t.Fatal(err)
	}
	p = s.get(fmt.Sprintf("events/%d", ev[1].ID), http.StatusOK)
	contains(t, p, fmt.Sprintf("%d steps, in the order recorded; the first %d shown.", n, console.StepsShown),
		fmt.Sprintf("%d s%03d 1", console.StepsShown, console.StepsShown))
	lacks(t, p, fmt.Sprintf("s%03d", console.StepsShown+1))
}

// The queues page lists each queue with unfinished events, or paused,
// with its figures.
func TestQueuesPage(t *testing.T) {
	s := newSite(t, console.Options{})
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k"}, lease.Event{Kind: "k", Queue: "bulk"}, lease.Event{Kind: "k", Queue: "bulk"})
	if _, err := s.store.PauseQueue(context.Background(), "bulk"); err != nil {
		t.Fatal(err)
	}
	p := s.get("queues", http.StatusOK)
	contains(t, p, "bulk paused since", "default running")
	lacks(t, p, "Pause a queue", "Resume")
	if !strings.Contains(p.text(), "bulk paused since") || !strings.Contains(p.text(), " 2 2 0 0 0") {
		t.Errorf("the queues page does not show bulk's 2 READY, 2 eligible:\n%s", p.text())
	}
}

// The held keys page lists the keys held by a FAILED event, with the
// events waiting behind each, and pages by key.
func TestKeysPage(t *testing.T) {
	s := newSite(t, console.Options{PageSize: 2})
	for _, key := range []string{"k-a", "k-b", "k-c"} {
		failedEvent(t, s.store, lease.Event{Kind: "sync", Key: key}, "remote down for "+key)
		pgtest.Enqueue(t, s.store, lease.Event{Kind: "sync", Key: key}, lease.Event{Kind: "sync", Key: key})
	}
	p := s.get("keys", http.StatusOK)
	contains(t, p, "k-a", "k-b", "remote down for k-a", "Next page")
	lacks(t, p, "k-c")
	next := nextLink(p)
	if next == "" {
		t.Fatal("no next page")
	}
	p = s.get("keys?"+strings.SplitN(next, "?", 2)[1], http.StatusOK)
	contains(t, p, "k-c", "remote down for k-c", "First page")
	lacks(t, p, "k-a", "Next page")
	if !strings.Contains(p.text(), "2 ") {
		t.Errorf("the keys page does not show the 2 events waiting:\n%s", p.text())
	}
}

// Bad input gets a 400 or 404 page saying what is wrong; a failed
// statement a 500 page without the statement or the server's words.
func TestBadInput(t *testing.T) {
	s := newSite(t, console.Options{})
	cases := []struct {
		path   string
		status int
		says   string
	}{
		{"events?status=PENDING", http.StatusBadRequest, `Unknown status "PENDING"`},
		{"events?after=x", http.StatusBadRequest, `"x" is not a place in the list`},
		{"events?after=-1", http.StatusBadRequest, `"-1" is not a place in the list`},
		{"events/abc", http.StatusBadRequest, `"abc" is not an event id`},
		{"events/0", http.StatusBadRequest, `"0" is not an event id`},
		{"events/99999999999999999999", http.StatusBadRequest, "is not an event id"},
		{"events/424242", http.StatusNotFound, "No event has id 424242"},
		{"nothing/here", http.StatusNotFound, "There is no page at this address"},
	}
	for _, c := range cases {
		p := s.get(c.path, c.status)
		contains(t, p, c.says, "Back to the overview")
	}

	// A table that does not exist: every page fails with 500, and says
	// what it could not do, not why the server refused.
	unmigrated, err := lease.New(s.store.DB(), s.store.Driver(), lease.Options{Schema: pgtest.SchemaName()})
	if err != nil {
		t.Fatal(err)
	}
	broken := newSiteOf(t, unmigrated, console.Options{})
	for _, path := range []string{"", "events", "events/1", "queues", "keys"} {
		p := broken.get(path, http.StatusInternalServerError)
		contains(t, p, "The database could not", "The details are in the server's log")
		lacks(t, p, "SELECT", "FROM", "relation", "does not exist", "SQLSTATE", "lease:")
	}
}

// A console mounted with http.StripPrefix("/ops/", c) (the prefix with its
// slash) serves the same pages.
func TestMountedWithTrailingSlash(t *testing.T) {
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	c, err := console.New(st, console.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops/", c))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/ops/", "/ops/events", "/ops/queues", "/ops/static/console.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
}

// The queues page lists the concurrency limits with the attempts live
// under each, when and by whom each was set, a link to its running
// events, and the latest changes; a read-only console shows no form.
func TestLimitsOnQueuesPage(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	p := s.get("queues", http.StatusOK)
	contains(t, p, "Concurrency limits", "No limit is set.")
	lacks(t, p, "Latest changes")

	for _, l := range []lease.Limit{
		{Scope: lease.ScopeKind, Name: "send-email", Max: 5},
		{Scope: lease.ScopeQueue, Name: "bulk", Max: 0},
	} {
		if _, err := s.store.SetLimit(ctx, l, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "send-email"}, lease.Event{Kind: "send-email"}, lease.Event{Kind: "send-email", Queue: "bulk"})
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 2 {
		t.Fatalf("claim under the limit: %d claims, %v; want 2", len(claims), err)
	}
	if _, err := s.store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 3}, "bob"); err != nil {
		t.Fatal(err)
	}
	ls, err := s.store.Limits(ctx)
	if err != nil || len(ls) != 2 {
		t.Fatalf("limits: %+v, %v", ls, err)
	}

	p = s.get("queues", http.StatusOK)
	contains(t, p,
		// Columns: limit, live of max, held back, set.
		"kind send-email 2/3 live 0 "+ls[0].SetAt.UTC().Format("2006-01-02 15:04:05Z07:00")+" by bob",
		"queue bulk 0/0 live held 1 due "+ls[1].SetAt.UTC().Format("2006-01-02 15:04:05Z07:00")+" by alice",
		"bulk running; limit 0/0 live held (1 due held back) 1 1 0 0 0", // the queue's own row
		"Latest changes of the limits",
		"kind send-email 5 3 bob", "queue bulk none 0 alice", "kind send-email none 5 alice",
	)
	lacks(t, p, "Set a limit", "Clear", "No limit is set.")
	if txt := p.text(); strings.Index(txt, "send-email 5 3 bob") > strings.Index(txt, "send-email none 5 alice") {
		t.Errorf("the changes are not latest first:\n%s", txt)
	}
	if !strings.Contains(p.body, `href="./events?kind=send-email&amp;status=INPROGRESS"`) || !strings.Contains(p.body, `href="./events?queue=bulk&amp;status=INPROGRESS"`) {
		t.Errorf("the limits do not link to their running events:\n%s", p.body)
	}
	if !strings.Contains(p.body, `href="./events?queue=bulk&amp;status=READY"`) || strings.Contains(p.body, `href="./events?kind=send-email&amp;status=READY"`) {
		t.Errorf("the limit holding events back does not link to them, or the one holding none does:\n%s", p.body)
	}

	// Full again: the kind's limit holds its READY event back.
	if _, err := s.store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 2}, "bob"); err != nil {
		t.Fatal(err)
	}
	p = s.get("queues", http.StatusOK)
	contains(t, p, "kind send-email 2/2 live 1 due ")
}

// The queues page lists the partition limits: a partition's own with its
// live attempts of its max and the events it set aside, linked to them;
// the default with the live attempts of every partition under it and the
// max of each. An event set aside says why on its page, with its
// partition linked to its events; the events page filters by partition.
func TestPartitionLimitsOnThePages(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	for _, l := range []lease.Limit{{Scope: lease.ScopePartition, Name: "", Max: 2}, {Scope: lease.ScopePartition, Name: "acme", Max: 1}} {
		if _, err := s.store.SetLimit(ctx, l, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	var es []lease.Event
	for _, p := range []string{"acme", "acme", "acme", "beta", "beta", "beta"} {
		es = append(es, lease.Event{Kind: "k", Partition: p})
	}
	in := pgtest.Enqueue(t, s.store, es...)
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 3 {
		t.Fatalf("claim under the partition limits: %d claims, %v; want 3", len(claims), err)
	}
	ls, err := s.store.Limits(ctx)
	if err != nil || len(ls) != 2 {
		t.Fatalf("limits: %+v, %v", ls, err)
	}

	p := s.get("queues", http.StatusOK)
	contains(t, p,
		// Columns: limit, live of max, held back, set.
		"partition default 2 live, 2 each 1 set aside "+ls[0].SetAt.UTC().Format("2006-01-02 15:04:05Z07:00")+" by alice",
		"partition acme 1/1 live 2 set aside "+ls[1].SetAt.UTC().Format("2006-01-02 15:04:05Z07:00")+" by alice",
		"partition default none 2 alice", "partition acme none 1 alice",
	)
	for _, link := range []string{`href="./events?partition=acme&amp;status=INPROGRESS"`, `href="./events?partition=acme&amp;status=WAITING"`} {
		if !strings.Contains(p.body, link) {
			t.Errorf("the queues page lacks the link %s:\n%s", link, p.body)
		}
	}
	if strings.Contains(p.body, `events?partition=&amp;`) {
		t.Errorf("the default limit links to the events of an empty partition:\n%s", p.body)
	}

	p = s.get(fmt.Sprintf("events/%d", in[1].ID), http.StatusOK)
	contains(t, p, "Why it is not running held by concurrency limit partition:acme (1/1 live), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared ( queues and limits )",
		"Partition acme")
	if !strings.Contains(p.body, `<a href="../events?partition=acme"><code>acme</code></a>`) {
		t.Errorf("the event's page does not link its partition to its events:\n%s", p.body)
	}
	p = s.get(fmt.Sprintf("events/%d", in[5].ID), http.StatusOK)
	contains(t, p, "held by concurrency limit partition default (2/2 live in partition beta), set aside (WAITING)")

	p = s.get("events?partition=beta", http.StatusOK)
	contains(t, p, fmt.Sprintf("%d", in[3].ID), fmt.Sprintf("%d", in[5].ID), "beta WAITING")
	for _, r := range in[:3] {
		if strings.Contains(p.body, fmt.Sprintf(`href="./events/%d"`, r.ID)) {
			t.Errorf("the events of partition beta list acme's event %d:\n%s", r.ID, p.body)
		}
	}
	p = s.get("events?partition=gamma", http.StatusOK)
	contains(t, p, "No events match these filters.")
}

// On a schema from before the limits (it lacks their tables), the queues
// page shows the queues and says to migrate, instead of failing.
func TestQueuesPageBeforeTheLimits(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	pgtest.Enqueue(t, s.store, lease.Event{Kind: "k", Queue: "bulk"})
	dropLimitTables(t, s.store)
	p := s.get("queues", http.StatusOK)
	contains(t, p, "bulk running 1 1 0 0 0", "Pause a queue",
		"This table's schema predates the concurrency limits: migrate it", "leasework migrate")
	lacks(t, p, "Set a limit", "No limit is set.")
}

// dropLimitTables drops the tables of st's limits, as a schema migrated
// before them (migration 17) lacks them.
func dropLimitTables(t *testing.T, st *lease.Store) {
	t.Helper()
	for _, suffix := range []string{"limit_changes", "limit_releases", "limit_slots", "limits"} {
		q := "DROP TABLE " + lease.QuoteIdent(st.Schema()) + "." + lease.QuoteIdent(st.Table()+"_"+suffix)
		if _, err := st.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// An event's page says why it is not running: each reason, in the
// store's words, with a link to the key's head or to the queues and
// limits; or, when nothing holds it back, what takes it. A finished
// event's page says nothing of it, and a schema that cannot say it does
// not fail the page.
func TestEventPageSaysWhyItIsNotRunning(t *testing.T) {
	s := newSite(t, console.Options{})
	ctx := context.Background()
	if _, err := s.store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 1}, "alice"); err != nil {
		t.Fatal(err)
	}
	mail := pgtest.Enqueue(t, s.store, lease.Event{Kind: "send-email"}, lease.Event{Kind: "send-email"})
	if claims, err := s.store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(claims) != 1 {
		t.Fatalf("claim under the limit: %d claims, %v; want 1", len(claims), err)
	}
	p := s.get(fmt.Sprintf("events/%d", mail[1].ID), http.StatusOK)
	contains(t, p, "Why it is not running held by concurrency limit kind:send-email (1/1 live): it starts when one of those attempts ends, or the limit is raised or cleared ( queues and limits )")
	if !strings.Contains(p.body, `<a href="../queues">queues and limits</a>`) {
		t.Errorf("the limit's reason does not link to the queues page:\n%s", p.body)
	}

	keyed := pgtest.Enqueue(t, s.store, lease.Event{Kind: "sync", Key: "customer-7"}, lease.Event{Kind: "sync", Key: "customer-7"})
	p = s.get(fmt.Sprintf("events/%d", keyed[1].ID), http.StatusOK)
	contains(t, p, fmt.Sprintf(`Why it is not running waiting for key "customer-7": its head, event %d, is READY ( event %d )`, keyed[0].ID, keyed[0].ID))
	if !strings.Contains(p.body, fmt.Sprintf(`<a href="../events/%d">event %d</a>`, keyed[0].ID, keyed[0].ID)) {
		t.Errorf("the key's reason does not link to its head:\n%s", p.body)
	}
	p = s.get(fmt.Sprintf("events/%d", keyed[0].ID), http.StatusOK)
	contains(t, p, "Why it is not running Nothing holds it back: the next claim of a worker that serves kind sync in queue default takes it.")

	later := pgtest.Enqueue(t, s.store, lease.Event{Kind: "report", Queue: "bulk", RunAt: time.Now().Add(time.Hour)})[0]
	if _, err := s.store.PauseQueue(ctx, "bulk"); err != nil {
		t.Fatal(err)
	}
	row, err := s.store.Get(ctx, later.ID)
	if err != nil {
		t.Fatal(err)
	}
	p = s.get(fmt.Sprintf("events/%d", later.ID), http.StatusOK)
	contains(t, p, "Why it is not running queue bulk is paused (since ",
		"): none of its events is claimed until it is resumed ( queues and limits ) not due until "+row.NextAttemptAt.UTC().Format("2006-01-02 15:04:05Z")+" (in ")

	done := failedEvent(t, s.store, lease.Event{Kind: "gone"}, "no")
	p = s.get(fmt.Sprintf("events/%d", done.ID), http.StatusOK)
	lacks(t, p, "Why it is not running")

	dropLimitTables(t, s.store)
	p = s.get(fmt.Sprintf("events/%d", mail[1].ID), http.StatusOK)
	contains(t, p, "Why it is not running It could not be read: the details are in the server's log.", "Kind send-email")
}
