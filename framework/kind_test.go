package framework_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

var sendEmail = lease.Kind[email]{Name: "email.send", Queue: "mail", Priority: 2, MaxAttempts: 3}

// A typed kind: enqueued from a Go value, with the kind's queue, priority
// and budget; handled as a Go value; a payload that does not decode fails
// its event at once; the kind's timeout bounds its attempts.
func TestTypedKindsEnqueueAndHandleValues(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		ctx := context.Background()
		w := newWorker(t, s, framework.Config{Queues: []framework.Queue{{Name: "mail"}}, PollInterval: 20 * time.Millisecond})
		got := make(chan email, 2)
		err := framework.HandleKind(w, sendEmail, func(ctx context.Context, c *leasework.Claim, m email) error {
			if m.Subject == "slow" {
				<-ctx.Done()
				return context.Cause(ctx)
			}
			got <- m
			return nil
		}, framework.KindOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := sendEmail.Enqueue(ctx, s, tx, email{To: "ada@example.com", Subject: "hi"}, email{Subject: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		bad, err := s.Enqueue(ctx, tx, lease.Event{Kind: "email.send", Queue: "mail", Payload: []byte("not json")})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(ctx, out[0].ID)
		if err != nil || r.Queue != "mail" || r.Priority != 2 || r.MaxAttempts != 3 || string(r.Payload) != `{"to":"ada@example.com","subject":"hi"}` {
			t.Fatalf("row: %+v, %v; want the kind's queue, priority and budget, a JSON payload", r, err)
		}
		stop := start(t, w)
		if m := recv(t, got, "the typed handler"); m.To != "ada@example.com" || m.Subject != "hi" {
			t.Errorf("handled %+v", m)
		}
		failed := waitRow(t, s, bad[0].ID, "the bad payload to fail", func(r lease.Row) bool { return r.Status == leasework.StatusFailed })
		if failed.Attempt != 1 || !strings.Contains(failed.LastError, "decode") {
			t.Errorf("bad payload: attempt %d, %q; want FAILED at once by the decode error", failed.Attempt, failed.LastError)
		}
		slow := waitRow(t, s, out[1].ID, "the slow attempt to time out", func(r lease.Row) bool { return r.Status == leasework.StatusReady && r.Attempt == 1 })
		if !strings.Contains(slow.LastError, leasework.ErrAttemptTimeout.Error()) {
			t.Errorf("slow: last error %q; want the attempt timeout", slow.LastError)
		}
		stop()
	})
}

// HandleKind refuses a kind of a queue the worker does not serve, and a
// kind timeout out of range.
func TestHandleKindChecksItsKind(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{})
	h := func(ctx context.Context, c *leasework.Claim, m email) error { return nil }
	if err := framework.HandleKind(w, sendEmail, h, framework.KindOptions{}); err == nil || !strings.Contains(err.Error(), `queue "mail"`) {
		t.Errorf("a kind of an unserved queue: %v", err)
	}
	other := lease.Kind[email]{Name: "email.other"}
	if err := framework.HandleKind(w, other, h, framework.KindOptions{Timeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "Timeout") {
		t.Errorf("a negative timeout: %v", err)
	}
	if err := framework.HandleKind(w, other, nil, framework.KindOptions{}); err == nil {
		t.Error("a nil handler was accepted")
	}
	_, err := lease.Kind[chan int]{Name: "unencodable"}.Event(make(chan int))
	if err == nil || !strings.Contains(err.Error(), `kind "unencodable": encode`) {
		t.Errorf("an unencodable value: %v", err)
	}
}
