package browser

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// screenshotPath is the picture of the overview in docs/console.md.
const screenshotPath = "../../docs/console.png"

// The overview of a table with representative data renders, and a full
// screenshot of it is a PNG of a sane size; with
// LEASEWORK_UPDATE_SCREENSHOT=1 it is written to docs/console.png.
func TestOverviewScreenshot(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{Schema: "shop_" + pgtest.SchemaName()[2:6]})
	seed(t, st)

	tb := newTab(t)
	tb.open(consoleSite(t, st, console.Options{Actions: true}))
	tb.sees("Overview", "READY", "FAILED", "In the last hour:", "Paused queues bulk", "Expired claims 1", "customer-42")
	shot, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 600 || b.Dy() > 10000 {
		t.Errorf("the screenshot is %dx%d; want at least 1000x600 and at most 10000 high", b.Dx(), b.Dy())
	}
	if os.Getenv("LEASEWORK_UPDATE_SCREENSHOT") == "1" {
		if err := os.MkdirAll(filepath.Dir(screenshotPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(screenshotPath, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(screenshotPath)
		t.Logf("wrote %s (%d bytes)", abs, len(shot))
	}
}

// seed fills st with an hour of a small shop's events: sent emails and
// delivered webhooks, invoices charged and a few declined, a paused queue
// of reports, a backlog, claims in flight (one of them abandoned), and a
// customer's invoices held behind a failed one.
func seed(t *testing.T, st *lease.Store) {
	t.Helper()
	ctx := context.Background()
	var events []lease.Event
	seq := 0
	add := func(n int, kind, queue string) {
		for range n {
			seq++
			events = append(events, lease.Event{Kind: kind, Queue: queue, EventID: fmt.Sprintf("%s-%04d", kind, seq), Payload: []byte(`{"n": 1}`)})
		}
	}
	add(420, "email.send", "")
	add(160, "webhook.deliver", "")
	add(90, "invoice.charge", "billing")
	pgtest.Enqueue(t, st, events...)

	finish := func(queue string, failEvery int) {
		claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1000, Lease: time.Minute, Queue: queue, Worker: "shop-worker-1"})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range claims {
			if failEvery > 0 && i%failEvery == failEvery-1 {
				_, err = st.Write(ctx, lease.Fail(c.Ref(), "502 Bad Gateway from the remote endpoint"))
			} else {
				_, err = st.Write(ctx, lease.Complete(c.Ref()))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	finish("", 37)
	finish("billing", 30)
	// Spread the finish times over the last hour, busier lately.
	_, err := st.DB().ExecContext(ctx, "UPDATE "+st.QualifiedTable()+` SET finished_at =
		date_trunc('minute', statement_timestamp()) - (59 - floor(sqrt((id * 7919) % 3600)))::int * interval '1 minute'
		WHERE status IN ('DONE', 'FAILED')`)
	if err != nil {
		t.Fatal(err)
	}

	// Now: a backlog, reports in a paused queue, claims in flight, one of
	// them abandoned, and a customer's invoices held behind a failed one.
	events = events[:0]
	add(35, "email.send", "")
	for i := range 12 {
		events = append(events, lease.Event{Kind: "report.build", Queue: "bulk", EventID: fmt.Sprintf("report-%02d", i)})
	}
	events = append(events, lease.Event{Kind: "invoice.charge", Queue: "billing", Key: "customer-42", EventID: "inv-42-001", MaxAttempts: 1})
	for i := range 2 {
		events = append(events, lease.Event{Kind: "invoice.charge", Queue: "billing", Key: "customer-42", EventID: fmt.Sprintf("inv-42-%03d", i+2)})
	}
	pgtest.Enqueue(t, st, events...)
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "billing", Worker: "shop-worker-2"})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := st.Write(ctx, lease.Fail(claims[0].Ref(), "card declined: insufficient funds")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, lease.ClaimRequest{Limit: 4, Lease: time.Minute, Worker: "shop-worker-2"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.DB().ExecContext(ctx, "UPDATE "+st.QualifiedTable()+` SET lease_until = statement_timestamp() - interval '90 seconds'
		WHERE id = (SELECT min(id) FROM `+st.QualifiedTable()+` WHERE status = 'INPROGRESS')`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PauseQueue(ctx, "bulk"); err != nil {
		t.Fatal(err)
	}
}
