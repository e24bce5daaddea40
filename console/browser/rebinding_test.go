package browser

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// attack is the script of a page that has reached the console as its own
// origin: it reads an event's page, takes the form token from it and posts
// a cancel of the event with it, as a same-origin fetch.
const attack = `(async (id) => {
	const out = {};
	const page = await fetch("/leasework/events/" + id);
	out.pageStatus = page.status;
	const body = await page.text();
	out.sawPayload = body.includes("payload-secret");
	const m = body.match(/name="csrf" value="([^"]+)"/);
	out.token = m ? m[1] : "";
	const post = await fetch("/leasework/events/" + id + "/cancel", {
		method: "POST", redirect: "manual",
		body: new URLSearchParams({csrf: out.token, reason: "rebound"}),
	});
	out.cancelStatus = post.status; // 0 for the redirect of a cancel taken
	return JSON.stringify(out);
})(%d)`

type attackResult struct {
	PageStatus   int
	SawPayload   bool
	Token        string
	CancelStatus int
}

// DNS rebinding in a real browser: the resolver maps attacker.example to
// the console's loopback address, as the attacker's DNS does once the
// attacker's page is loaded. That page (served here beside the console, as
// the attacker's server served it before the rebinding) then fetches the
// console same-origin: the browser sends Host: attacker.example:<port>,
// and the console refuses every request, a navigation to it too. The same
// script on a page of the console's own address reads the token and
// cancels, so the refusal is the host check's doing.
func TestRebindingPageIsRefused(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	evil := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>cats</title><main>Cute cats</main>")
	})
	site := consoleSite(t, st, console.Options{Actions: true}, "/cats", evil)
	u, err := url.Parse(site)
	if err != nil {
		t.Fatal(err)
	}
	rebound := "http://attacker.example:" + u.Port()
	tb := newTab(t, chromedp.Flag("host-resolver-rules", "MAP attacker.example "+u.Hostname()))

	ids := pgtest.Enqueue(t, st,
		lease.Event{Kind: "mail", EventID: "target", Payload: []byte("payload-secret")},
		lease.Event{Kind: "mail", EventID: "control", Payload: []byte("payload-secret")})
	target, control := ids[0].ID, ids[1].ID

	resp, err := chromedp.Run(tb.ctx, chromedp.NavigateResponse(rebound+"/leasework/"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusForbidden || !strings.Contains(tb.text(), "does not answer to the host name") {
		t.Errorf("open %s/leasework/: status %d, want 403 saying why; it shows:\n%s", rebound, resp.Status, tb.text())
	}

	run := func(origin string, id int64) attackResult {
		t.Helper()
		tb.open(origin + "/cats")
		out, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](fmt.Sprintf(attack, id), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("the script on %s/cats: %v", origin, err)
		}
		var r attackResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("the script on %s/cats returned %q: %v", origin, out, err)
		}
		return r
	}

	got := run(rebound, target)
	if got.PageStatus != http.StatusForbidden || got.SawPayload || got.Token != "" || got.CancelStatus != http.StatusForbidden {
		t.Errorf("the rebound page: %+v; want the event's page refused (403, no payload, no token) and the cancel refused (403)", got)
	}
	if r, err := st.Get(t.Context(), target); err != nil || r.Status != leasework.StatusReady {
		t.Errorf("after the rebound page's cancel the event is %+v (%v); want READY", r, err)
	}

	got = run(strings.TrimSuffix(site, "/leasework/"), control)
	if got.PageStatus != http.StatusOK || !got.SawPayload || got.Token == "" || got.CancelStatus != 0 {
		t.Errorf("the same script on the console's own address: %+v; want the page read, the token taken and the cancel redirected", got)
	}
	if r, err := st.Get(t.Context(), control); err != nil || r.Status != leasework.StatusDiscarded {
		t.Errorf("after the cancel from the console's own address the event is %+v (%v); want DISCARDED", r, err)
	}
}
