package framework_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// fakeClock is a scheduler's clock that moves only when the test sets it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	until time.Time
	woken chan struct{}
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep waits until the clock is set at or past until, or ctx ends.
func (c *fakeClock) Sleep(ctx context.Context, until time.Time) {
	c.mu.Lock()
	if !c.now.Before(until) {
		c.mu.Unlock()
		return
	}
	woken := make(chan struct{})
	c.waiters = append(c.waiters, fakeWaiter{until, woken})
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters = slices.DeleteFunc(c.waiters, func(w fakeWaiter) bool { return w.woken == woken })
		c.mu.Unlock()
	case <-woken:
	}
}

// awaitSleepers waits until n schedulers sleep on the clock.
func (c *fakeClock) awaitSleepers(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d schedulers asleep", n), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiters) == n
	})
}

// Set moves the clock to t and wakes the sleepers it reaches.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if t.Before(w.until) {
			kept = append(kept, w)
		} else {
			close(w.woken)
		}
	}
	c.waiters = kept
}

// firing is one enqueue of a firing, as a worker's scheduler reports it.
type firing struct {
	eventID   string
	duplicate bool
	err       error
}

// scheduled is a running worker with one schedule, and its firings.
type scheduled struct {
	w     *framework.Worker
	fired chan firing
	stop  func()
}

// startScheduled starts a worker on s's table with schedule p, its time
// from clk (the real clock when nil). The worker handles p's kind with a
// handler that does nothing.
func startScheduled(t *testing.T, s *lease.Store, clk *fakeClock, p framework.Periodic) *scheduled {
	t.Helper()
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	register(t, w, p.Kind, framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	if clk != nil {
		framework.SetSchedulerClock(w, clk.Now, clk.Sleep)
	}
	fired := make(chan firing, 1000)
	framework.OnFiring(w, func(eventID string, duplicate bool, err error) {
		fired <- firing{eventID, duplicate, err}
	})
	if err := w.Schedule(p); err != nil {
		t.Fatal(err)
	}
	return &scheduled{w: w, fired: fired, stop: start(t, w)}
}

// expect waits for the worker's next firing, which must be eventID enqueued
// without error, and reports whether it was a duplicate.
func (sw *scheduled) expect(t *testing.T, eventID string) bool {
	t.Helper()
	f := recv(t, sw.fired, "firing "+eventID+" by worker "+sw.w.ID())
	if f.eventID != eventID || f.err != nil {
		t.Fatalf("worker %s fired %q (err %v); want %q", sw.w.ID(), f.eventID, f.err, eventID)
	}
	return f.duplicate
}

// periodicRows returns the event ids of the rows of kind, sorted.
func periodicRows(t *testing.T, s *lease.Store, kind string) []string {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(),
		"SELECT event_id FROM "+s.QualifiedTable()+" WHERE kind = $1 ORDER BY event_id", kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// base is the tests' fake time: a past instant, so that the events
// enqueued are due at once.
var base = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// tickID is the event id of schedule "tick"'s firing at base + d.
func tickID(d time.Duration) string { return "tick:" + base.Add(d).Format(time.RFC3339) }

// Three workers with the same schedule over one table, the clock driven
// through several firings: every worker tries every firing, and each is
// enqueued once, by one of them.
func TestPeriodicThreeWorkersEnqueueEachFiringOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		clk := newFakeClock(base.Add(500 * time.Millisecond))
		p := framework.Periodic{Name: "tick", Schedule: "@every 10s", Kind: "tick", Payload: []byte("p")}
		var workers []*scheduled
		for range 3 {
			workers = append(workers, startScheduled(t, s, clk, p))
		}
		const firings = 5
		var want []string
		for i := range firings {
			at := time.Duration(i) * 10 * time.Second
			if i > 0 { // the first is the one due at start (MissedRunOnce)
				clk.Set(base.Add(at))
			}
			id := tickID(at)
			want = append(want, id)
			inserted := 0
			for _, sw := range workers {
				if !sw.expect(t, id) {
					inserted++
				}
			}
			if inserted != 1 {
				t.Fatalf("firing %s was inserted by %d workers; want 1, the others finding a duplicate", id, inserted)
			}
		}
		for _, sw := range workers {
			sw.stop()
			select {
			case f := <-sw.fired:
				t.Errorf("worker %s fired %+v after the last firing", sw.w.ID(), f)
			default:
			}
		}
		if got := periodicRows(t, s, "tick"); !slices.Equal(got, want) {
			t.Fatalf("rows %q; want one per firing, %q", got, want)
		}
		r, err := s.GetByEventID(context.Background(), want[1])
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Payload) != "p" || r.Queue != lease.DefaultQueue || !r.NextAttemptAt.Equal(base.Add(10*time.Second)) {
			t.Errorf("row %+v; want payload p, the default queue and RunAt the fire time", r)
		}
	})
}

// A worker that restarts does not enqueue again what it enqueued before:
// the latest firing it finds at start (MissedRunOnce) is a duplicate.
func TestPeriodicRestartDoesNotFireAgain(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		clk := newFakeClock(base.Add(time.Second))
		p := framework.Periodic{Name: "tick", Schedule: "@every 10s", Kind: "tick"}
		first := startScheduled(t, s, clk, p)
		if first.expect(t, tickID(0)) {
			t.Fatal("the first firing was a duplicate")
		}
		clk.Set(base.Add(10 * time.Second))
		if first.expect(t, tickID(10*time.Second)) {
			t.Fatal("the second firing was a duplicate")
		}
		if err := first.w.Schedule(framework.Periodic{Name: "late", Schedule: "@hourly", Kind: "tick"}); err == nil ||
			!strings.Contains(err.Error(), "already running") {
			t.Errorf("Schedule on a running worker: %v; want an error", err)
		}
		first.stop()

		clk.Set(base.Add(15 * time.Second))
		second := startScheduled(t, s, clk, p)
		if !second.expect(t, tickID(10*time.Second)) {
			t.Fatal("the restarted worker enqueued the firing of 00:00:10 again")
		}
		clk.Set(base.Add(20 * time.Second))
		if second.expect(t, tickID(20*time.Second)) {
			t.Fatal("the next firing was a duplicate")
		}
		second.stop()
		want := []string{tickID(0), tickID(10 * time.Second), tickID(20 * time.Second)}
		if got := periodicRows(t, s, "tick"); !slices.Equal(got, want) {
			t.Fatalf("rows %q; want %q", got, want)
		}
	})
}

// After a gap of several periods with no worker running, MissedRunOnce
// enqueues the latest missed firing once, and MissedSkip none.
func TestPeriodicMissedFirings(t *testing.T) {
	for _, missed := range []framework.Missed{framework.MissedRunOnce, framework.MissedSkip} {
		t.Run(missed.String(), func(t *testing.T) {
			s := newStore(t, pgtest.Drivers[0].New())
			clk := newFakeClock(base.Add(time.Second))
			p := framework.Periodic{Name: "tick", Schedule: "@every 10s", Kind: "tick"}
			first := startScheduled(t, s, clk, p)
			first.expect(t, tickID(0))
			first.stop()

			clk.Set(base.Add(53 * time.Second)) // firings of :10 to :50 missed
			p.Missed = missed
			second := startScheduled(t, s, clk, p)
			want := []string{tickID(0)}
			if missed == framework.MissedRunOnce {
				second.expect(t, tickID(50*time.Second))
				want = append(want, tickID(50*time.Second))
			}
			clk.awaitSleepers(t, 1) // started: 00:00:53 is its start time
			clk.Set(base.Add(60 * time.Second))
			second.expect(t, tickID(60*time.Second)) // and, with MissedSkip, nothing before it
			second.stop()
			want = append(want, tickID(60*time.Second))
			if got := periodicRows(t, s, "tick"); !slices.Equal(got, want) {
				t.Fatalf("rows %q; want %q", got, want)
			}
		})
	}
}

// MissedRunOnce looks back at most MissedLookback: an older firing may
// have run and had its row deleted by retention since. A cron spec without
// a zone is read in UTC, one with TZ= in its zone.
func TestPeriodicMissedLookback(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	day := time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)

	// 3am yesterday is 23.5 hours old: skipped; the next firing runs.
	clk := newFakeClock(day.Add(150 * time.Minute))
	daily := startScheduled(t, s, clk, framework.Periodic{Name: "daily", Schedule: "0 3 * * *", Kind: "daily"})
	clk.awaitSleepers(t, 1)
	clk.Set(day.Add(3 * time.Hour))
	daily.expect(t, "daily:2025-01-02T03:00:00Z")
	daily.stop()

	// 9am New York yesterday (14:00 UTC) is 22 hours old: enqueued.
	clk = newFakeClock(day.Add(12 * time.Hour))
	ny := startScheduled(t, s, clk, framework.Periodic{Name: "ny", Schedule: "TZ=America/New_York 0 9 * * *", Kind: "ny"})
	ny.expect(t, "ny:2025-01-01T14:00:00Z")
	ny.stop()

	if got := periodicRows(t, s, "daily"); !slices.Equal(got, []string{"daily:2025-01-02T03:00:00Z"}) {
		t.Errorf("daily rows %q; want only today's firing", got)
	}
}

// Schedule refuses a schedule it could not run, naming the field.
func TestPeriodicScheduleErrors(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	w := newWorker(t, s, framework.Config{})
	ok := framework.Periodic{Name: "ok", Schedule: "@hourly", Kind: "k"}
	if err := w.Schedule(ok); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"*/5 * * * *", "TZ=Europe/Paris 0 9 * * 1-5", "CRON_TZ=UTC @daily", "@every 1h30m", "@every 1s"} {
		if err := w.Schedule(framework.Periodic{Name: spec, Schedule: spec, Kind: "k"}); err != nil {
			t.Errorf("Schedule %q: %v", spec, err)
		}
	}
	with := func(f func(p *framework.Periodic)) framework.Periodic {
		p := framework.Periodic{Name: "p", Schedule: "@every 1m", Kind: "k"}
		f(&p)
		return p
	}
	for _, c := range []struct {
		p    framework.Periodic
		want string
	}{
		{with(func(p *framework.Periodic) { p.Name = "" }), "Periodic.Name is empty"},
		{with(func(p *framework.Periodic) { p.Name = "a\x00b" }), "Periodic.Name is not valid UTF-8 without NUL bytes"},
		{with(func(p *framework.Periodic) { p.Name = strings.Repeat("n", framework.MaxPeriodicNameBytes+1) }), "Periodic.Name is 1004 bytes long; at most 1003"},
		{with(func(p *framework.Periodic) { p.Schedule = "" }), `Periodic.Schedule "": empty spec string`},
		{with(func(p *framework.Periodic) { p.Schedule = "61 * * * *" }), `Periodic.Schedule "61 * * * *": end of range (61) above maximum (59)`},
		{with(func(p *framework.Periodic) { p.Schedule = "* * * *" }), `Periodic.Schedule "* * * *": expected exactly 5 fields`},
		{with(func(p *framework.Periodic) { p.Schedule = "@every 500ms" }), "the interval 500ms must be a whole number of seconds, at least 1s"},
		{with(func(p *framework.Periodic) { p.Schedule = "@every 1.5s" }), "the interval 1.5s must be a whole number of seconds"},
		{with(func(p *framework.Periodic) { p.Schedule = "@every -1m" }), "the interval -1m0s must be"},
		{with(func(p *framework.Periodic) { p.Schedule = "@every" }), "unrecognized descriptor"},
		{with(func(p *framework.Periodic) { p.Schedule = "TZ=UTC" }), "a time zone must be followed by a space"},
		{with(func(p *framework.Periodic) { p.Schedule = "TZ=Local 0 3 * * *" }), "the local time zone differs from machine to machine"},
		{with(func(p *framework.Periodic) { p.Schedule = "TZ=Nowhere/Town 0 3 * * *" }), "provided bad location Nowhere/Town"},
		{with(func(p *framework.Periodic) { p.Schedule = "0 0 31 4 *" }), `Periodic.Schedule "0 0 31 4 *" never fires`},
		{with(func(p *framework.Periodic) { p.Kind = "" }), "Periodic.Kind: lease: kind is empty"},
		{with(func(p *framework.Periodic) { p.Queue = "q\x00" }), "Periodic.Queue: lease: queue"},
		{with(func(p *framework.Periodic) { p.Priority = lease.MaxPriority + 1 }), "Periodic.Priority is 10; it must be between 0 and 9"},
		{with(func(p *framework.Periodic) { p.Priority = -1 }), "Periodic.Priority is -1"},
		{with(func(p *framework.Periodic) { p.Missed = 7 }), "Periodic.Missed is Missed(7); it must be MissedRunOnce or MissedSkip"},
		{ok, `framework: Schedule "ok": the worker already has a schedule of that name`},
	} {
		err := w.Schedule(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Schedule(%+v): %v; want an error containing %q", c.p, err, c.want)
		}
	}

	del := newWorker(t, s, framework.Config{DeleteAtCompletion: true})
	if err := del.Schedule(ok); err == nil || !strings.Contains(err.Error(), "Config.DeleteAtCompletion") {
		t.Errorf("Schedule with DeleteAtCompletion: %v; want an error naming it", err)
	}
}

// The demonstration on the real clock: three workers run "@every 1s" over
// one table for several firings; each firing is enqueued once (one worker
// inserts it, the others find it there) and handled once. Run it with -v
// to see each firing.
func TestPeriodicThreeWorkersRealClock(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	var mu sync.Mutex
	handled := map[string]int{}
	reports := map[string][]string{} // event id -> "worker: inserted" or "worker: duplicate"
	all := map[string]int{}          // event id -> workers that tried it
	var stops []func()
	for i := range 3 {
		w := newWorker(t, s, framework.Config{WorkerID: fmt.Sprintf("w%d", i+1), PollInterval: 20 * time.Millisecond})
		register(t, w, "tick", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
			mu.Lock()
			handled[c.EventID]++
			mu.Unlock()
			return nil
		})
		framework.OnFiring(w, func(eventID string, duplicate bool, err error) {
			what := "inserted"
			switch {
			case err != nil:
				what = "error: " + err.Error()
			case duplicate:
				what = "duplicate"
			}
			mu.Lock()
			reports[eventID] = append(reports[eventID], w.ID()+" "+what)
			all[eventID]++
			mu.Unlock()
		})
		if err := w.Schedule(framework.Periodic{Name: "tick", Schedule: "@every 1s", Kind: "tick"}); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, start(t, w))
	}
	began := time.Now()
	waitFor(t, "four firings tried by all three workers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, k := range all {
			if k == 3 {
				n++
			}
		}
		return n >= 4
	})
	mu.Lock()
	tried := slices.Collect(maps.Keys(reports))
	mu.Unlock()
	waitFor(t, "the firings tried handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range tried {
			if handled[id] == 0 {
				return false
			}
		}
		return true
	})
	for _, stop := range stops {
		stop()
	}
	ran := time.Since(began)
	ids := periodicRows(t, s, "tick")
	mu.Lock()
	defer mu.Unlock()
	fired := slices.Sorted(maps.Keys(reports))
	if !slices.Equal(ids, fired) {
		t.Fatalf("rows %q; want one per firing tried, %q", ids, fired)
	}
	for _, id := range fired {
		inserted := 0
		for _, r := range reports[id] {
			if strings.HasSuffix(r, " inserted") {
				inserted++
			} else if !strings.HasSuffix(r, " duplicate") {
				t.Errorf("%s: %s", id, r)
			}
		}
		r, err := s.GetByEventID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if inserted != 1 || handled[id] > 1 || (slices.Contains(tried, id) && handled[id] != 1) {
			t.Errorf("%s: inserted by %d workers, handled %d times; want once each", id, inserted, handled[id])
		}
		slices.Sort(reports[id])
		t.Logf("%s  rows=1 status=%s handled=%d  %s", id, r.Status, handled[id], strings.Join(reports[id], ", "))
	}
	t.Logf("%d firings in %v on three workers; %d rows", len(fired), ran.Round(10*time.Millisecond), len(ids))
}
