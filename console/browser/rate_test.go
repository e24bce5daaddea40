package browser

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An operator sets a rate limit of 2 starts an hour on a kind (its name is
// markup) with the queues page's form while a worker runs; the worker
// starts two of its three events and leaves the third READY; the third's
// page says the rate limit holds it, and when the next start is allowed;
// the operator follows it to the queues and limits, sees the limit full,
// clears it with its row's form, and the worker runs the third. No script
// of the name runs on any page.
func TestSetAndClearARateLimit(t *testing.T) {
	drv := pgxdriver.New()
	db := pgtest.Open(t, drv)
	w, err := framework.New(db, drv, framework.Config{Schema: pgtest.SchemaName(), PollInterval: framework.MinPollInterval, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Store()
	ctx := context.Background()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.DropSchema(context.Background()) })

	const kind = `s"><img src=x onerror=window.__pwned=8>` // under 40 bytes: the table shows it whole
	if err := w.Register(kind, leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil }), framework.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	tb := newTab(t)
	site := consoleSite(t, st, console.Options{Actions: true, Operator: func(*http.Request) string { return "alice" }})
	tb.open(site + "queues")
	tb.sees("No rate limit is set.", "Set a rate limit")
	form := `form[action$="rate-limits/set"]`
	for field, v := range map[string]string{`select[name="scope"]`: "kind", `input[name="name"]`: kind, `input[name="rate"]`: "2/h"} {
		if _, err := chromedp.Run(tb.ctx, chromedp.SetValue(chromedp.CSS(form+" "+field), v)); err != nil {
			t.Fatal(err)
		}
	}
	tb.click(form + ` button`)
	tb.sees("The rate limit of kind "+kind+" is 2 starts per 1h0m0s (was none).", "kind "+kind+" 0/2 starts per 1h0m0s now", "by alice")
	tb.ranNothing()
	if rls, err := st.RateLimits(ctx); err != nil || len(rls) != 1 || rls[0].RateLimit != (lease.RateLimit{Scope: lease.ScopeKind, Name: kind, Max: 2, Per: time.Hour}) {
		t.Fatalf("stored rate limits = %+v, %v; want the kind's, 2 an hour, its name as typed", rls, err)
	}

	in := pgtest.Enqueue(t, st, lease.Event{Kind: kind, EventID: "sms-1"}, lease.Event{Kind: kind, EventID: "sms-2"},
		lease.Event{Kind: kind, EventID: "sms-3"})
	status := func(id int64) leasework.Status {
		r, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	eventually(t, "the first two events run", func() bool {
		return status(in[0].ID) == leasework.StatusDone && status(in[1].ID) == leasework.StatusDone
	})
	if s := status(in[2].ID); s != leasework.StatusReady {
		t.Fatalf("the third event is %s; want READY, held by the rate limit", s)
	}

	tb.open(site + fmt.Sprintf("events/%d", in[2].ID))
	tb.sees(fmt.Sprintf("Event %d READY", in[2].ID), "Cost 1 start under rate limits",
		"held by rate limit kind:"+kind+" (2/2 starts per 1h0m0s): the next start is allowed at ")
	tb.ranNothing()
	tb.click(`ul.reasons a[href$="queues"]`)
	tb.sees("kind "+kind+" 2/2 starts per 1h0m0s full until ", "rate:kind "+kind+" none 2 per 1h0m0s alice")
	tb.ranNothing()

	// Cleared with its row's form: the worker runs the third.
	tb.click(`table.rate-limits form[action$="rate-limits/clear"] button`)
	tb.sees("The rate limit of kind "+kind+" is cleared: workers claim its events as they have room.", "No rate limit is set.")
	tb.ranNothing()
	eventually(t, "the third event runs once the rate limit is cleared", func() bool { return status(in[2].ID) == leasework.StatusDone })
}
