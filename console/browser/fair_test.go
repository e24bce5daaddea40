package browser

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An operator makes queue bulk fair with the queues page's form, gives a
// partition (its name is markup) a weight of 3 and the queue a priority
// aging of 10 minutes; a claim of the partition's kind takes 3 of its
// events, so that its fourth waits its turn; the fourth's page says so,
// with its weight and how far ahead its partition is; the operator
// follows it to the queues, sees the two partitions served, clears the
// partition's weight with its row's form (the event's partition now
// weighs the default: 1 row ahead), then the queue's default weight (the
// queue is no longer fair: nothing holds the event) and its aging. No
// script of the name runs on any page.
func TestMakeAQueueFair(t *testing.T) {
	drv := pgxdriver.New()
	st := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	const partition = `p"><img src=x onerror=window.__pwned=9>` // under 40 bytes: the table shows it whole

	tb := newTab(t)
	site := consoleSite(t, st, console.Options{Actions: true, Operator: func(*http.Request) string { return "alice" }})
	tb.open(site + "queues")
	tb.sees("No queue is fair.", "Make a queue fair, or weigh a partition", "No queue ages its events' priority.")
	fill := func(form string, fields map[string]string) {
		t.Helper()
		for field, v := range fields {
			if _, err := chromedp.Run(tb.ctx, chromedp.SetValue(chromedp.CSS(form+" "+field), v)); err != nil {
				t.Fatal(err)
			}
		}
		tb.click(form + " button")
	}
	fill(`form.fair-default`, map[string]string{`input[name="queue"]`: "bulk", `input[name="weight"]`: "1"})
	tb.sees("The default weight of queue bulk is 1 (was none): the queue is fair", "bulk default 1 0 partitions")
	fill(`form.fair-partition`, map[string]string{`input[name="queue"]`: "bulk", `input[name="partition"]`: partition, `input[name="weight"]`: "3"})
	tb.sees("The weight of partition "+partition+" in queue bulk is 3 (was none).", "bulk "+partition+" 3 not served")
	tb.ranNothing()
	fill(`form.aging`, map[string]string{`input[name="queue"]`: "bulk", `input[name="after"]`: "10m"})
	tb.sees("The priority aging of queue bulk is 10m0s (was none)", "bulk 10m0s")
	ws, err := st.Weights(ctx)
	if err != nil || len(ws) != 2 || ws[1].Weight != (lease.Weight{Queue: "bulk", Partition: partition, Weight: 3}) || ws[1].SetBy != "alice" {
		t.Fatalf("stored weights = %+v, %v; want bulk's default and the partition's 3, its name as typed, by alice", ws, err)
	}

	var es []lease.Event
	for range 4 {
		es = append(es, lease.Event{Kind: "a", Queue: "bulk", Partition: partition})
	}
	es = append(es, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"}, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"})
	in := pgtest.Enqueue(t, st, es...)
	if claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 3, Lease: time.Minute, Queue: "bulk", Kinds: []string{"a"}}); err != nil || len(claims) != 3 {
		t.Fatalf("claim of kind a = %d claims, %v; want the partition's first 3", len(claims), err)
	}

	event := site + fmt.Sprintf("events/%d", in[3].ID)
	tb.open(event)
	tb.sees(fmt.Sprintf("Event %d READY", in[3].ID),
		"waits its turn in fair queue bulk: partition "+partition+" (weight 3) is 3 rows ahead of the partition furthest behind")
	tb.ranNothing()
	tb.click(`ul.reasons a[href$="queues"]`)
	tb.sees("bulk running; fair, 2 partitions served; aging after 10m0s", "bulk default 1 2 partitions", "bulk "+partition+" 3 served",
		"weight bulk "+partition+" none 3 alice")
	tb.ranNothing()

	// The partition's weight cleared with its row's form (the second:
	// the queue's default comes first): it weighs the default, 1.
	tb.click(`table.weights tbody tr:nth-child(2) form[action$="weights/clear"] button`)
	tb.sees("The weight of partition " + partition + " in queue bulk is cleared: it weighs the queue's default.")
	tb.ranNothing()
	tb.open(event)
	tb.sees("waits its turn in fair queue bulk: partition " + partition + " (weight 1) is 1 row ahead of the partition furthest behind")

	// The default cleared: the queue is no longer fair, nothing holds
	// the event; then the aging.
	tb.open(site + "queues")
	tb.click(`table.weights form[action$="weights/clear"] button`)
	tb.sees("The default weight of queue bulk is cleared: it is no longer fair", "No queue is fair.")
	tb.click(`table.agings form[action$="aging/clear"] button`)
	tb.sees("The priority aging of queue bulk is cleared", "No queue ages its events' priority.")
	tb.open(event)
	tb.sees("Nothing holds it back")
	tb.ranNothing()
	if ws, err := st.Weights(ctx); err != nil || len(ws) != 0 {
		t.Errorf("stored weights after the clears = %+v, %v; want none", ws, err)
	}
}
