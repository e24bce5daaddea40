package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An operator follows a failed event from the overview to its page,
// requeues it with the page's form, and sees it run again and end DONE: a
// worker runs in the test, its handler failing the invoice for good the
// first time and charging it the second.
func TestRequeueAFailedEvent(t *testing.T) {
	drv := pgxdriver.New()
	db := pgtest.Open(t, drv)
	w, err := framework.New(db, drv, framework.Config{Schema: pgtest.SchemaName(), PollInterval: framework.MinPollInterval, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Store()
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.DropSchema(context.Background()) })

	var charges atomic.Int32
	err = w.Register("invoice.charge", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if charges.Add(1) == 1 {
			return leasework.Permanent(errors.New("card declined: insufficient funds"))
		}
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register("email.send", leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil }), framework.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	pgtest.Enqueue(t, st,
		lease.Event{Kind: "email.send", EventID: "welcome-ada"},
		lease.Event{Kind: "email.send", EventID: "welcome-grace"},
		lease.Event{Kind: "invoice.charge", EventID: "inv-1001", Payload: []byte(`{"customer": "ada", "amount_cents": 4200}`)},
	)
	var inv lease.Row
	eventually(t, "the invoice fails and the emails are sent", func() bool {
		inv, err = st.GetByEventID(context.Background(), "inv-1001")
		if err != nil {
			t.Fatal(err)
		}
		done, err := st.List(context.Background(), lease.ListRequest{Status: leasework.StatusDone})
		return err == nil && inv.Status == leasework.StatusFailed && len(done) == 2
	})

	tb := newTab(t)
	site := consoleSite(t, st, console.Options{Actions: true})
	tb.open(site)
	tb.sees("Overview", "2 DONE", "1 FAILED", "In the last hour: 2 DONE, 1 FAILED", "invoice.charge", "actions enabled")

	tb.click(`a.card.status-FAILED`)
	tb.sees("Events", "inv-1001", "invoice.charge", "card declined: insufficient funds")
	if strings.Contains(tb.text(), "welcome-ada") {
		t.Error("the FAILED events list shows a DONE event")
	}

	tb.click(`table.events a[href$="events/` + fmt.Sprint(inv.ID) + `"]`)
	tb.sees(fmt.Sprintf("Event %d", inv.ID), "FAILED", "inv-1001", `{"customer": "ada", "amount_cents": 4200}`,
		"card declined: insufficient funds", "Generation 1", "Attempt 1 of 25")

	tb.click(`form[action$="/requeue"] button`)
	tb.sees(fmt.Sprintf("Event %d requeued: it is READY, due now", inv.ID))

	// The worker, woken by the requeue, runs it again: reload until its
	// page shows it DONE.
	eventually(t, "the requeued invoice shows DONE after a reload", func() bool {
		tb.open(site + fmt.Sprintf("events/%d", inv.ID))
		return strings.Contains(tb.text(), fmt.Sprintf("Event %d DONE", inv.ID))
	})
	tb.sees(fmt.Sprintf("Event %d", inv.ID), "DONE", "Generation 3", "Attempt 1 of 25", "Last error none")
	if n := charges.Load(); n != 2 {
		t.Errorf("the invoice handler ran %d times; want 2", n)
	}
}
