package framework_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Middleware wraps every handler, the first given outermost, Transactional
// handlers included; what it returns is the attempt's result, and its
// panics are caught like a handler's.
func TestMiddlewareWrapsEveryHandler(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	var mu sync.Mutex
	var trace []string
	record := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, what)
	}
	named := func(name string) framework.Middleware {
		return func(next leasework.Handler) leasework.Handler {
			return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
				record(name + ">" + c.EventID)
				err := next.Handle(ctx, c)
				record(name + "<" + c.EventID)
				if c.EventID == "refused" && name == "outer" {
					return leasework.Permanent(errors.New("refused by middleware"))
				}
				return err
			})
		}
	}
	if err := w.Use(named("outer")); err != nil {
		t.Fatal(err)
	}
	if err := w.Use(named("inner"), func(next leasework.Handler) leasework.Handler {
		return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			if c.EventID == "panics" {
				panic("middleware panic")
			}
			return next.Handle(ctx, c)
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Use(nil); err == nil {
		t.Error("Use(nil) was accepted")
	}
	register(t, w, "k", framework.RetryPolicy{MaxAttempts: 1}, func(ctx context.Context, c *leasework.Claim) error {
		record("handler " + c.EventID)
		return nil
	})
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "plain"}, lease.Event{Kind: "k", EventID: "refused"},
		lease.Event{Kind: "k", EventID: "panics"})
	stop := start(t, w)
	for _, e := range ids {
		waitRow(t, s, e.ID, "the event to finish", func(r lease.Row) bool {
			return r.Status == leasework.StatusDone || r.Status == leasework.StatusFailed
		})
	}
	stop()
	if err := w.Use(named("late")); err == nil {
		t.Error("Use after Run was accepted")
	}
	// The events run at once: read each one's trace on its own.
	mu.Lock()
	perEvent := map[string][]string{}
	for _, step := range trace {
		id := step[strings.LastIndexAny(step, "<> ")+1:]
		perEvent[id] = append(perEvent[id], step)
	}
	mu.Unlock()
	for id, want := range map[string]string{
		"plain":   "outer>plain inner>plain handler plain inner<plain outer<plain",
		"refused": "outer>refused inner>refused handler refused inner<refused outer<refused",
		"panics":  "outer>panics inner>panics",
	} {
		if got := strings.Join(perEvent[id], " "); got != want {
			t.Errorf("trace of %s: %q; want %q", id, got, want)
		}
	}
	ctx := context.Background()
	if r, _ := s.Get(ctx, ids[0].ID); r.Status != leasework.StatusDone {
		t.Errorf("plain: %s; want DONE", r.Status)
	}
	if r, _ := s.Get(ctx, ids[1].ID); r.Status != leasework.StatusFailed || r.LastError != "refused by middleware" {
		t.Errorf("refused: %s %q; want FAILED by the middleware's error", r.Status, r.LastError)
	}
	if r, _ := s.Get(ctx, ids[2].ID); r.Status != leasework.StatusFailed || !strings.Contains(r.LastError, "middleware panic") {
		t.Errorf("panics: %s %q; want FAILED with the panic recorded", r.Status, r.LastError)
	}
}

// A middleware that panics while it wraps a handler, or returns none, makes
// Run return an error naming it, before anything is claimed.
func TestMiddlewareThatCannotWrapStopsRun(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	for _, c := range []struct {
		mw   framework.Middleware
		want string
	}{
		{func(next leasework.Handler) leasework.Handler { panic("no") }, `middleware 0 panicked wrapping the handler of "k": no`},
		{func(next leasework.Handler) leasework.Handler { return nil }, `middleware 0 returned no handler for "k"`},
	} {
		w := newWorker(t, s, framework.Config{})
		if err := w.Use(c.mw); err != nil {
			t.Fatal(err)
		}
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error { return nil })
		id := pgtest.Enqueue(t, s, lease.Event{Kind: "k"})[0].ID
		if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run: %v; want an error saying %s", err, c.want)
		}
		if r, err := s.Get(context.Background(), id); err != nil || r.Status != leasework.StatusReady || r.Generation != 0 {
			t.Errorf("row after Run refused: %+v, %v; want READY, never claimed", r, err)
		}
	}
}
