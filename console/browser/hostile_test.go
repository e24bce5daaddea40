package browser

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Texts that would run script if the console wrote them as markup: each
// sets window.__pwned or opens a dialog.
const (
	hScript = `<script>window.__pwned=1;alert("script")</script>`
	hImg    = `"'><img src=x onerror="window.__pwned=2;alert('img')">`
	hArea   = `</textarea><svg onload="window.__pwned=3">`
	hLink   = `javascript:window.__pwned=4`
)

// An event whose event id, kind, key, queue, payload, metadata, last error,
// step (name and value) and output are markup is shown as text on every
// page in a real browser, in the reasons an event waiting behind it is not
// running too: no script runs (window.__pwned stays undefined, no dialog
// opens) and a person reads the markup as written.
func TestHostileEventRunsNothing(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	ctx := context.Background()
	queue := `q<script>window.__pwned=5</script>`
	ev := lease.Event{
		EventID: hLink + " " + hScript, Kind: hImg, Key: hArea, Queue: queue,
		Payload: []byte(hScript + "\n" + hImg + "\n" + hArea), MaxAttempts: 1,
		Metadata: map[string]string{hScript: hImg, "link": hLink},
	}
	id := pgtest.Enqueue(t, st, ev)[0].ID
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: queue})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	for _, w := range []lease.Write{lease.Step(claims[0].Ref(), hArea, []byte(hScript)), lease.Output(claims[0].Ref(), []byte(hImg+" output")),
		lease.Fail(claims[0].Ref(), hImg+" "+hScript)} {
		if _, err := st.Write(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	behind := pgtest.Enqueue(t, st, lease.Event{Kind: hImg, Key: hArea, Queue: queue, EventID: hLink + " behind"})[0].ID
	if _, err := st.PauseQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}

	site := consoleSite(t, st, console.Options{Actions: true})
	tb := newTab(t)
	pages := []struct {
		path string
		want []string
	}{
		{"", []string{hImg, hArea, queue}},
		{"events", []string{"javascript:window.__pwned=4 <script…", `"'><img src=x onerror="window.__pwned=2…`, "</textarea><svg onload=…"}},
		{"events?" + url.Values{"kind": {hImg}, "queue": {queue}}.Encode(), []string{hLink + " behind"}},
		{fmt.Sprintf("events/%d", id), []string{hLink + " " + hScript, hImg, hArea, queue, hImg + " " + hScript, "link " + hLink,
			"1 " + hArea + " 1 ", hScript + " Output", hImg + " output"}},
		// Why it is not running: its queue paused, its key's head FAILED.
		{fmt.Sprintf("events/%d", behind), []string{"Why it is not running", "queue " + queue + " is paused",
			fmt.Sprintf("waiting for key %q, held by its head, event %d, FAILED", hArea, id)}},
		{"queues", []string{queue}},
		{"keys", []string{`</textarea><svg onload="window.__pwned=`, hImg + " <script>"}},
		{"events/" + url.PathEscape(hScript), []string{`<script>window.__pwned=1;alert(`, "is not an event id"}},
	}
	for _, p := range pages {
		tb.openAny(site + p.path)
		tb.sees(p.want...)
		tb.ranNothing()
	}
	// Links that carry the hostile values: follow the kind's link of the
	// event page, and the resume form of the hostile queue.
	tb.open(site + fmt.Sprintf("events/%d", id))
	tb.click(`dl.fields a[href*="kind="]`)
	tb.sees(hLink + " behind")
	tb.ranNothing()
	tb.open(site + "queues")
	tb.click(`form[action$="queues/resume"] button`)
	tb.sees("Queue " + queue + " resumed")
	tb.ranNothing()
}

// openAny loads u whatever its status (an error page is a page too).
func (tb *tab) openAny(u string) {
	tb.t.Helper()
	if _, err := chromedp.Run(tb.ctx, chromedp.NavigateResponse(u)); err != nil {
		tb.t.Fatalf("open %s: %v", u, err)
	}
	tb.waitMain()
}

// ranNothing fails the test if a script of the page ran: window.__pwned is
// set, or a dialog opened.
func (tb *tab) ranNothing() {
	tb.t.Helper()
	loc, _ := chromedp.Run(tb.ctx, chromedp.Location())
	pwned, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`typeof window.__pwned`))
	if err != nil {
		tb.t.Fatal(err)
	}
	if pwned != "undefined" {
		tb.t.Errorf("%s: a hostile script ran: window.__pwned is set", loc)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.dialogs) > 0 {
		tb.t.Errorf("%s: a hostile script opened dialogs: %q", loc, tb.dialogs)
	}
}
