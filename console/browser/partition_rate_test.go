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

// An operator sets a rate limit of 1 start an hour on a partition (its
// name is markup) with the queues page's form by name, and the default
// rate limit of the partitions, 5 a minute, with its own form, while a
// worker runs; the worker starts one of the partition's two events and
// its rate limit sets the other aside; the second's page says so, and
// when the next start is allowed; the operator follows it to the queues
// and limits, sees the partition's limit full with one event set aside,
// clears it with its row's form, and the worker runs the second under the
// default. No script of the name runs on any page.
func TestSetAndClearAPartitionRateLimit(t *testing.T) {
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

	const partition = `p"><img src=x onerror=window.__pwned=9>` // under 40 bytes: the table shows it whole
	if err := w.Register("report", leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil }), framework.RetryPolicy{}); err != nil {
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
	set := func(form string, fields map[string]string) {
		t.Helper()
		for field, v := range fields {
			if _, err := chromedp.Run(tb.ctx, chromedp.SetValue(chromedp.CSS(form+" "+field), v)); err != nil {
				t.Fatal(err)
			}
		}
		tb.click(form + ` button`)
	}
	set(`form.rate-by-name`, map[string]string{`select[name="scope"]`: "partition", `input[name="name"]`: partition, `input[name="rate"]`: "1/h"})
	tb.sees("The rate limit of partition "+partition+" is 1 start per 1h0m0s (was none).", "partition "+partition+" 0/1 starts per 1h0m0s now 0", "by alice")
	tb.ranNothing()
	set(`form.rate-partition-default`, map[string]string{`input[name="rate"]`: "5/m"})
	tb.sees("The default rate limit of the partitions is 5 starts per 1m0s each (was none)", "partition default 0 recent, 5 each per 1m0s per partition 0")
	tb.ranNothing()
	if rls, err := st.RateLimits(ctx); err != nil || len(rls) != 2 ||
		rls[0].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: "", Max: 5, Per: time.Minute}) ||
		rls[1].RateLimit != (lease.RateLimit{Scope: lease.ScopePartition, Name: partition, Max: 1, Per: time.Hour}) {
		t.Fatalf("stored rate limits = %+v, %v; want the default of the partitions, 5 a minute, and the partition's, 1 an hour, its name as typed", rls, err)
	}

	in := pgtest.Enqueue(t, st, lease.Event{Kind: "report", EventID: "report-1", Partition: partition},
		lease.Event{Kind: "report", EventID: "report-2", Partition: partition})
	status := func(id int64) leasework.Status {
		r, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	eventually(t, "the first report runs and the second is set aside", func() bool {
		return status(in[0].ID) == leasework.StatusDone && status(in[1].ID) == leasework.StatusWaiting
	})

	tb.open(site + fmt.Sprintf("events/%d", in[1].ID))
	tb.sees(fmt.Sprintf("Event %d WAITING", in[1].ID), "Partition "+partition,
		"held by rate limit partition:"+partition+" (1/1 starts per 1h0m0s): the next start is allowed at ")
	tb.ranNothing()
	tb.click(`ul.reasons a[href$="queues"]`)
	tb.sees("partition "+partition+" 1/1 starts per 1h0m0s full until ", "1 set aside", "rate:partition "+partition+" none 1 per 1h0m0s alice")
	tb.ranNothing()

	// Its events set aside, from its row.
	tb.click(`table.rate-limits a[href*="status=WAITING"]`)
	tb.sees("report-2")
	tb.ranNothing()

	// Cleared with its row's form (the second row: the default's is
	// first): the default applies, and the worker runs the second.
	tb.open(site + "queues")
	tb.click(`table.rate-limits tbody tr:nth-child(2) form[action$="rate-limits/clear"] button`)
	tb.sees("The rate limit of partition " + partition + " is cleared: the default rate limit of the partitions applies to it, if one is set")
	tb.ranNothing()
	eventually(t, "the second report runs under the default once the partition's rate limit is cleared", func() bool {
		return status(in[1].ID) == leasework.StatusDone
	})
	if rls, err := st.RateLimits(ctx); err != nil || len(rls) != 1 || rls[0].Name != "" {
		t.Errorf("stored rate limits after the clear = %+v, %v; want the default of the partitions alone", rls, err)
	}
}
