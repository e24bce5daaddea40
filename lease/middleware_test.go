package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Enqueue middleware wraps every enqueue, the first outermost: it may
// change the events (here, a queue for every event of a kind), and refuse
// a call; the changed events are checked like any others.
func TestEnqueueMiddleware(t *testing.T) {
	var calls []string
	route := func(next lease.EnqueueFunc) lease.EnqueueFunc {
		return func(ctx context.Context, events []lease.Event) ([]lease.Enqueued, error) {
			calls = append(calls, "route")
			for i := range events {
				if events[i].Kind == "email" {
					events[i].Queue = "mail"
				}
			}
			return next(ctx, events)
		}
	}
	guard := func(next lease.EnqueueFunc) lease.EnqueueFunc {
		return func(ctx context.Context, events []lease.Event) ([]lease.Enqueued, error) {
			calls = append(calls, "guard")
			for _, e := range events {
				if e.Kind == "forbidden" {
					return nil, errors.New("forbidden kind")
				}
			}
			return next(ctx, events)
		}
	}
	db := pgtest.Open(t, drv)
	s, err := lease.New(db, drv, lease.Options{Schema: pgtest.SchemaName(), EnqueueMiddleware: []lease.EnqueueMiddleware{route, guard}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.DropSchema(ctx)
	events := []lease.Event{{Kind: "email", EventID: "e1"}, {Kind: "report", EventID: "r1"}}
	out := pgtest.Enqueue(t, s, events...)
	if strings.Join(calls, ",") != "route,guard" || events[0].Queue != "" {
		t.Errorf("calls %v, caller's event %+v; want route then guard, the caller's slice untouched", calls, events[0])
	}
	if r, err := s.Get(ctx, out[0].ID); err != nil || r.Queue != "mail" {
		t.Errorf("the email event: %+v, %v; want queue mail", r, err)
	}
	if r, err := s.Get(ctx, out[1].ID); err != nil || r.Queue != lease.DefaultQueue {
		t.Errorf("the report event: %+v, %v; want the default queue", r, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "forbidden"}); err == nil || err.Error() != "forbidden kind" {
		t.Errorf("enqueue refused by the middleware: %v", err)
	}
	if _, err := lease.New(db, drv, lease.Options{EnqueueMiddleware: []lease.EnqueueMiddleware{nil}}); err == nil {
		t.Error("a nil enqueue middleware was accepted")
	}
}

// A panic in an enqueue middleware is the enqueue's error, not the end of
// the calling goroutine (a worker's scheduler, say); nothing is enqueued.
func TestEnqueueMiddlewarePanicIsAnError(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	base := pgtest.Store(t, drv, lease.Options{})
	s, err := lease.New(base.DB(), drv, lease.Options{Schema: base.Schema(), Table: base.Table(),
		EnqueueMiddleware: []lease.EnqueueMiddleware{func(next lease.EnqueueFunc) lease.EnqueueFunc {
			return func(ctx context.Context, events []lease.Event) ([]lease.Enqueued, error) {
				panic("middleware bug")
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.Enqueue(context.Background(), tx, lease.Event{Kind: "k"})
	if err == nil || !strings.Contains(err.Error(), "the enqueue middleware panicked: middleware bug") || out != nil {
		t.Fatalf("enqueue through a panicking middleware: %v, %v; want an error saying it panicked", out, err)
	}
	if rows, err := s.ListTx(context.Background(), s.WrapTx(tx), lease.ListRequest{}); err != nil || len(rows) != 0 {
		t.Errorf("rows after the panic: %v, %v; want none", rows, err)
	}
}
