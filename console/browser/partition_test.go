package browser

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An operator finds an event set aside by its partition's limit (the
// partition's name is markup), follows its page to the queues and limits,
// raises the partition's limit with its row's form, and sees the event
// run: a worker runs in the test, its handler holding the partition's only
// place with the first event until the test lets it go. No script of the
// name runs on any page.
func TestRaiseAPartitionLimit(t *testing.T) {
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

	const partition = `a"><img src=x onerror=window.__pwned=7>`
	if _, err := st.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Name: partition, Max: 1}, "alice"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	err = w.Register("report", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if c.EventID != "report-1" {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), framework.RetryPolicy{})
	if err != nil {
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

	in := pgtest.Enqueue(t, st,
		lease.Event{Kind: "report", EventID: "report-1", Partition: partition},
		lease.Event{Kind: "report", EventID: "report-2", Partition: partition},
	)
	status := func(id int64) leasework.Status {
		r, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	eventually(t, "the first report runs and the second is set aside", func() bool {
		return status(in[0].ID) == leasework.StatusInProgress && status(in[1].ID) == leasework.StatusWaiting
	})

	tb := newTab(t)
	site := consoleSite(t, st, console.Options{Actions: true})
	tb.open(site + fmt.Sprintf("events/%d", in[1].ID))
	tb.sees(fmt.Sprintf("Event %d WAITING", in[1].ID), "Partition "+partition,
		"held by concurrency limit partition:"+partition+" (1/1 live), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared")
	tb.ranNothing()

	// The partition's events, from the event's page.
	tb.click(`dl.fields a[href*="partition="]`)
	tb.sees("report-1", "report-2")
	tb.ranNothing()

	tb.open(site + fmt.Sprintf("events/%d", in[1].ID))
	tb.click(`ul.reasons a[href$="queues"]`)
	tb.sees("partition "+partition+" 1/1 live 1 set aside", "by alice")
	tb.ranNothing()

	// Raise it to 2 with the row's form.
	form := `table.limits form[action$="limits/set"]`
	if _, err := chromedp.Run(tb.ctx, chromedp.SetValue(chromedp.CSS(form+` input[name="max"]`), "2")); err != nil {
		t.Fatal(err)
	}
	tb.click(form + ` button`)
	// The worker may already have brought the second report back and
	// started it when the page is drawn: its live count is 1 or 2 of 2.
	tb.sees("The limit of partition "+partition+" is 2 live attempts (was 1).", "/2 live")
	tb.ranNothing()
	if ls, err := st.Limits(ctx); err != nil || len(ls) != 1 || ls[0].Limit != (lease.Limit{Scope: lease.ScopePartition, Name: partition, Max: 2}) {
		t.Fatalf("stored limits = %+v, %v; want the partition's limit raised to 2, its name as it was", ls, err)
	}

	// The worker's next claims bring the event back and run it, while the
	// first still holds its place.
	eventually(t, "the report set aside runs once the limit is raised", func() bool {
		return status(in[1].ID) == leasework.StatusDone
	})
	if s := status(in[0].ID); s != leasework.StatusInProgress {
		t.Errorf("the first report is %s; want it still running", s)
	}
	close(release)
	eventually(t, "the first report finishes", func() bool { return status(in[0].ID) == leasework.StatusDone })
	tb.open(site + "events?" + url.Values{"partition": {partition}, "status": {"DONE"}}.Encode())
	tb.sees("report-1", "report-2")
	tb.ranNothing()
}
