package framework_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// Schedules in a zone at its daylight-saving changes. The rule (see
// "Periodic events" in the package doc): a local time that occurs once
// fires at that instant; a local time the clocks skip fires once, at the
// first instant after the gap; a local time the clocks repeat fires once,
// at its first occurrence. Local times that name the same instant are one
// firing. The fire times here come from the scheduler's own computation
// (framework.Firings), never from the wall clock.

// utc parses an RFC 3339 instant.
func utc(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// zone loads a time zone and checks that tzdata has the offsets a test
// expects on either side of a change, so that an old tzdata fails with a
// message saying so rather than with wrong fire times.
func zone(t *testing.T, name, change string, before, after time.Duration) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	at := utc(t, change)
	_, ob := at.Add(-time.Second).In(loc).Zone()
	_, oa := at.In(loc).Zone()
	if time.Duration(ob)*time.Second != before || time.Duration(oa)*time.Second != after {
		t.Fatalf("tzdata: %s changes at %s from %v to %v; this test expects %v to %v", name, change,
			time.Duration(ob)*time.Second, time.Duration(oa)*time.Second, before, after)
	}
	return loc
}

// firingsIn returns spec's firings in (from, to], RFC 3339 in UTC.
func firingsIn(t *testing.T, spec, from, to string) []string {
	t.Helper()
	times, err := framework.Firings(spec, utc(t, from), utc(t, to))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(times))
	for i, at := range times {
		out[i] = at.UTC().Format(time.RFC3339)
	}
	return out
}

// expectFirings checks spec's firings in (from, to] against want, and that
// each is where every worker lands whenever it asks: the next firing after
// any instant between two firings is the later one, so a worker started or
// woken at any time computes the same fire time, and the same event id.
func expectFirings(t *testing.T, spec, from, to string, want ...string) {
	t.Helper()
	got := firingsIn(t, spec, from, to)
	if !slices.Equal(got, want) {
		t.Fatalf("%q fires in (%s, %s] at\n  %q\nwant\n  %q", spec, from, to, got, want)
	}
	prev := utc(t, from)
	for _, w := range want {
		at := utc(t, w)
		for _, probe := range []time.Time{prev, prev.Add(time.Second), prev.Add(at.Sub(prev) / 2), at.Add(-time.Second)} {
			if !probe.Before(at) {
				continue
			}
			next, err := framework.NextFiring(spec, probe)
			if err != nil {
				t.Fatal(err)
			}
			if !next.Equal(at) {
				t.Errorf("%q: the next firing after %s is %s; want %s", spec, probe.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339), w)
			}
		}
		latest, err := framework.LatestFiring(spec, prev, at.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !latest.Equal(at) {
			t.Errorf("%q: the latest firing in (%s, %s] is %s; want %s", spec, prev.UTC().Format(time.RFC3339), at.Add(time.Second).UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339), w)
		}
		prev = at
	}
}

// The case: 2:30am Paris fired twice on 2026-10-25 (at 02:30 CEST
// and 02:30 CET, two event ids) and not at all on 2026-03-29 (no 02:30).
func TestPeriodicDaylightSavingParisDaily(t *testing.T) {
	zone(t, "Europe/Paris", "2026-03-29T01:00:00Z", time.Hour, 2*time.Hour)
	zone(t, "Europe/Paris", "2026-10-25T01:00:00Z", 2*time.Hour, time.Hour)
	const spec = "TZ=Europe/Paris 30 2 * * *"
	// Spring: 02:00 CET becomes 03:00 CEST at 01:00Z; 02:30 is skipped and
	// fires at the end of the gap, 03:00 CEST.
	expectFirings(t, spec, "2026-03-26T12:00:00Z", "2026-03-31T12:00:00Z",
		"2026-03-27T01:30:00Z", "2026-03-28T01:30:00Z",
		"2026-03-29T01:00:00Z",
		"2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z")
	// Autumn: 03:00 CEST becomes 02:00 CET at 01:00Z; 02:30 happens twice
	// and fires at the first, 02:30 CEST (00:30Z), not again at 01:30Z.
	expectFirings(t, spec, "2026-10-22T12:00:00Z", "2026-10-27T12:00:00Z",
		"2026-10-23T00:30:00Z", "2026-10-24T00:30:00Z",
		"2026-10-25T00:30:00Z",
		"2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z")
}

// localTicks returns the local wall times (in loc, "01-02 15:04") of the
// instants in ats.
func localTicks(t *testing.T, loc *time.Location, ats []string) []string {
	t.Helper()
	out := make([]string, len(ats))
	for i, a := range ats {
		out[i] = utc(t, a).In(loc).Format("01-02 15:04")
	}
	return out
}

// wallRange returns the local wall times from first to last (in loc) in
// steps, leaving out the ones the clocks skip: each tick a schedule of that
// step must fire once, the skipped ones at the end of the gap, which is a
// wall time of the range itself.
func wallRange(loc *time.Location, first, last time.Time, step time.Duration) []string {
	exists := map[string]bool{}
	for u := first.Add(-30 * time.Hour); !u.After(last.Add(30 * time.Hour)); u = u.Add(time.Minute) {
		exists[u.In(loc).Format("01-02 15:04")] = true
	}
	var out []string
	for w := first; !w.After(last); w = w.Add(step) { // naive wall clock, read as UTC
		if s := w.Format("01-02 15:04"); exists[s] {
			out = append(out, s)
		}
	}
	return out
}

// An hourly and an every-minute schedule across both Paris changes: every
// local tick fires once, in order. In spring the skipped hour's ticks fire
// together at 03:00 CEST with 03:00's own (one instant, one firing), so no
// UTC hour or minute goes without a firing; in autumn the repeated hour's
// ticks fire at their first occurrence only, so the second occurrence has
// none.
func TestPeriodicDaylightSavingParisHourlyAndEveryMinute(t *testing.T) {
	paris := zone(t, "Europe/Paris", "2026-03-29T01:00:00Z", time.Hour, 2*time.Hour)
	zone(t, "Europe/Paris", "2026-10-25T01:00:00Z", 2*time.Hour, time.Hour)
	wall := func(s string) time.Time { return utc(t, "2026-"+s+":00Z") }

	expectFirings(t, "TZ=Europe/Paris 0 * * * *", "2026-03-28T22:00:00Z", "2026-03-29T04:00:00Z",
		"2026-03-28T23:00:00Z", // 00:00 CET
		"2026-03-29T00:00:00Z", // 01:00 CET
		"2026-03-29T01:00:00Z", // 02:00 skipped, and 03:00 CEST
		"2026-03-29T02:00:00Z", // 04:00 CEST
		"2026-03-29T03:00:00Z",
		"2026-03-29T04:00:00Z")
	expectFirings(t, "TZ=Europe/Paris 0 * * * *", "2026-10-24T21:00:00Z", "2026-10-25T04:00:00Z",
		"2026-10-24T22:00:00Z", // 00:00 CEST
		"2026-10-24T23:00:00Z", // 01:00 CEST
		"2026-10-25T00:00:00Z", // 02:00 CEST; not again at 02:00 CET (01:00Z)
		"2026-10-25T02:00:00Z", // 03:00 CET
		"2026-10-25T03:00:00Z",
		"2026-10-25T04:00:00Z")

	for _, c := range []struct {
		spec, from, to        string
		firstWall, lastWall   string
		step                  time.Duration
		wantFirings, wantWall int
	}{
		{"TZ=Europe/Paris 0 * * * *", "2026-03-28T20:00:00Z", "2026-03-29T06:00:00Z", "03-28T22:00", "03-29T08:00", time.Hour, 10, 10},
		{"TZ=Europe/Paris 0 * * * *", "2026-10-24T20:00:00Z", "2026-10-25T06:00:00Z", "10-24T23:00", "10-25T07:00", time.Hour, 9, 9},
		{"TZ=Europe/Paris * * * * *", "2026-03-28T23:00:00Z", "2026-03-29T03:00:00Z", "03-29T00:01", "03-29T05:00", time.Minute, 240, 240},
		{"TZ=Europe/Paris * * * * *", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z", "10-25T01:01", "10-25T04:00", time.Minute, 180, 180},
		{"TZ=Europe/Paris */15 * * * *", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z", "10-25T01:15", "10-25T04:00", 15 * time.Minute, 12, 12},
	} {
		got := firingsIn(t, c.spec, c.from, c.to)
		want := wallRange(paris, wall(c.firstWall), wall(c.lastWall), c.step)
		if len(got) != c.wantFirings || len(want) != c.wantWall {
			t.Errorf("%q in (%s, %s]: %d firings and %d local ticks; want %d and %d", c.spec, c.from, c.to, len(got), len(want), c.wantFirings, c.wantWall)
		}
		if ticks := localTicks(t, paris, got); !slices.Equal(ticks, want) {
			t.Errorf("%q in (%s, %s] fires at local times\n  %q\nwant each tick once\n  %q", c.spec, c.from, c.to, ticks, want)
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Errorf("%q: firing %s after %s", c.spec, got[i], got[i-1])
			}
		}
	}
	// The skipped hour in UTC: no minute without a firing, none twice.
	got := firingsIn(t, "TZ=Europe/Paris * * * * *", "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z")
	for i, g := range got {
		if want := utc(t, "2026-03-29T00:01:00Z").Add(time.Duration(i) * time.Minute).Format(time.RFC3339); g != want {
			t.Fatalf("every minute across the spring change: firing %d at %s; want %s", i, g, want)
		}
	}
	if len(got) != 120 {
		t.Fatalf("every minute across the spring change: %d firings in two hours; want 120", len(got))
	}
}

// Lord Howe shifts by 30 minutes: +11 to +10:30 at 02:00 LHDT on
// 2026-04-05 (01:30 to 01:59 happen twice), +10:30 to +11 at 02:00 LHST on
// 2026-10-04 (02:00 to 02:29 skipped).
func TestPeriodicDaylightSavingLordHowe(t *testing.T) {
	zone(t, "Australia/Lord_Howe", "2026-04-04T15:00:00Z", 11*time.Hour, 10*time.Hour+30*time.Minute)
	zone(t, "Australia/Lord_Howe", "2026-10-03T15:30:00Z", 10*time.Hour+30*time.Minute, 11*time.Hour)
	expectFirings(t, "TZ=Australia/Lord_Howe 45 1 * * *", "2026-04-02T00:00:00Z", "2026-04-06T00:00:00Z",
		"2026-04-02T14:45:00Z", "2026-04-03T14:45:00Z",
		"2026-04-04T14:45:00Z", // 01:45 LHDT, the first; not 15:15Z
		"2026-04-05T15:15:00Z") // 01:45 LHST
	expectFirings(t, "TZ=Australia/Lord_Howe 15 2 * * *", "2026-10-02T00:00:00Z", "2026-10-05T00:00:00Z",
		"2026-10-02T15:45:00Z", // 02:15 LHST
		"2026-10-03T15:30:00Z", // 02:15 skipped: the end of the gap, 02:30 LHDT
		"2026-10-04T15:15:00Z") // 02:15 LHDT
	expectFirings(t, "TZ=Australia/Lord_Howe 0 * * * *", "2026-10-03T13:00:00Z", "2026-10-03T18:00:00Z",
		"2026-10-03T13:30:00Z", // 00:00 LHST
		"2026-10-03T14:30:00Z", // 01:00 LHST
		"2026-10-03T15:30:00Z", // 02:00 skipped: 02:30 LHDT
		"2026-10-03T16:00:00Z", // 03:00 LHDT
		"2026-10-03T17:00:00Z",
		"2026-10-03T18:00:00Z")
	expectFirings(t, "TZ=Australia/Lord_Howe 0 * * * *", "2026-04-04T12:00:00Z", "2026-04-04T17:00:00Z",
		"2026-04-04T13:00:00Z", "2026-04-04T14:00:00Z", // 00:00, 01:00 LHDT
		"2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z") // 02:00, 03:00 LHST
	expectFirings(t, "TZ=Australia/Lord_Howe */10 1 5 4 *", "2026-04-04T00:00:00Z", "2026-04-05T00:00:00Z",
		"2026-04-04T14:00:00Z", "2026-04-04T14:10:00Z", "2026-04-04T14:20:00Z",
		"2026-04-04T14:30:00Z", "2026-04-04T14:40:00Z", "2026-04-04T14:50:00Z") // 01:30-01:50 at their first
}

// Havana changes at midnight: 00:00 CST becomes 01:00 CDT on 2026-03-08
// (midnight skipped), and 01:00 CDT becomes 00:00 CST on 2026-11-01
// (midnight happens twice).
func TestPeriodicDaylightSavingAtMidnight(t *testing.T) {
	zone(t, "America/Havana", "2026-03-08T05:00:00Z", -5*time.Hour, -4*time.Hour)
	zone(t, "America/Havana", "2026-11-01T05:00:00Z", -4*time.Hour, -5*time.Hour)
	for _, spec := range []string{"TZ=America/Havana 0 0 * * *", "TZ=America/Havana @daily"} {
		expectFirings(t, spec, "2026-03-06T12:00:00Z", "2026-03-09T12:00:00Z",
			"2026-03-07T05:00:00Z", // 00:00 CST
			"2026-03-08T05:00:00Z", // skipped: the end of the gap, 01:00 CDT
			"2026-03-09T04:00:00Z") // 00:00 CDT
		expectFirings(t, spec, "2026-10-30T12:00:00Z", "2026-11-02T12:00:00Z",
			"2026-10-31T04:00:00Z", // 00:00 CDT
			"2026-11-01T04:00:00Z", // 00:00 CDT, the first; not 05:00Z
			"2026-11-02T05:00:00Z") // 00:00 CST
	}
	// Sunday midnight, on the Sunday of each change.
	expectFirings(t, "TZ=America/Havana 0 0 * * 0", "2026-03-01T12:00:00Z", "2026-03-15T12:00:00Z",
		"2026-03-08T05:00:00Z", "2026-03-15T04:00:00Z")
	expectFirings(t, "TZ=America/Havana 0 0 * * sun", "2026-10-25T12:00:00Z", "2026-11-08T12:00:00Z",
		"2026-11-01T04:00:00Z", "2026-11-08T05:00:00Z")
	expectFirings(t, "TZ=America/Havana 0 * * * *", "2026-03-08T02:00:00Z", "2026-03-08T08:00:00Z",
		"2026-03-08T03:00:00Z", "2026-03-08T04:00:00Z", // 22:00, 23:00 CST
		"2026-03-08T05:00:00Z", // 00:00 skipped, and 01:00 CDT
		"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z")
}

// The rule against a brute-force reading of it, minute by minute, for
// several schedules around every 2026 change of zones with changes of one
// hour, thirty minutes, two hours, at midnight and at an odd quarter: each
// matching local time fires at the instant it names if it occurs once, at
// its first occurrence if it occurs twice, at the first instant after the
// gap if it does not occur; equal instants are one firing.
func TestPeriodicDaylightSavingRule(t *testing.T) {
	specs := []struct {
		spec  string
		match func(h, m int) bool
	}{
		{"* * * * *", func(h, m int) bool { return true }},
		{"0 * * * *", func(h, m int) bool { return m == 0 }},
		{"*/15 * * * *", func(h, m int) bool { return m%15 == 0 }},
		{"30 2 * * *", func(h, m int) bool { return h == 2 && m == 30 }},
		{"45 1 * * *", func(h, m int) bool { return h == 1 && m == 45 }},
		{"0 0 * * *", func(h, m int) bool { return h == 0 && m == 0 }},
		{"30 23 * * *", func(h, m int) bool { return h == 23 && m == 30 }},
		{"59 0-3 * * *", func(h, m int) bool { return h <= 3 && m == 59 }},
	}
	changes := 0
	for _, name := range []string{"Europe/Paris", "Australia/Lord_Howe", "America/Havana", "America/Santiago", "Antarctica/Troll", "Pacific/Chatham", "America/Nuuk"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); ; {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || end.Year() > 2026 {
				break
			}
			at = end
			changes++
			from, to := end.Add(-26*time.Hour), end.Add(26*time.Hour)
			for _, s := range specs {
				spec := "TZ=" + name + " " + s.spec
				got, err := framework.Firings(spec, from, to)
				if err != nil {
					t.Fatal(err)
				}
				want := ruleFirings(loc, s.match, from, to)
				if !slices.EqualFunc(got, want, time.Time.Equal) {
					t.Errorf("%q around the change at %s: %d firings, the rule says %d; first difference: %s",
						spec, end.Format(time.RFC3339), len(got), len(want), firstDifference(loc, got, want))
				}
			}
		}
	}
	if changes < 12 {
		t.Fatalf("tzdata: found %d changes in 2026 in the zones tested; want at least 12", changes)
	}
}

// ruleFirings reads the rule by brute force: every UTC minute around (from,
// to] and its wall time in loc, then each matching wall time's instant.
func ruleFirings(loc *time.Location, match func(h, m int) bool, from, to time.Time) []time.Time {
	type tick struct {
		at   time.Time
		wall time.Time // the wall clock, read as UTC
	}
	var ticks []tick
	first := map[time.Time]time.Time{} // wall time -> its first instant
	for u := from.Add(-30 * time.Hour); !u.After(to.Add(30 * time.Hour)); u = u.Add(time.Minute) {
		l := u.In(loc)
		w := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
		ticks = append(ticks, tick{u, w})
		if _, ok := first[w]; !ok {
			first[w] = u
		}
	}
	var out []time.Time
	lo, hi := ticks[0].wall.Add(28*time.Hour), ticks[len(ticks)-1].wall.Add(-28*time.Hour)
	for w := lo; !w.After(hi); w = w.Add(time.Minute) {
		if !match(w.Hour(), w.Minute()) {
			continue
		}
		at, ok := first[w]
		if !ok { // skipped: the first instant whose wall time is past it
			for _, k := range ticks {
				if k.wall.After(w) {
					at = k.at
					break
				}
			}
		}
		if at.After(from) && !at.After(to) && (len(out) == 0 || !at.Equal(out[len(out)-1])) {
			out = append(out, at)
		}
	}
	return out
}

func firstDifference(loc *time.Location, got, want []time.Time) string {
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i].UTC().Format(time.RFC3339) + " (" + got[i].In(loc).Format("15:04 MST") + ")"
		}
		if i < len(want) {
			w = want[i].UTC().Format(time.RFC3339) + " (" + want[i].In(loc).Format("15:04 MST") + ")"
		}
		if g != w {
			return "firing " + g + ", the rule's " + w
		}
	}
	return "none"
}

// Two workers run "TZ=Europe/Paris 30 2 * * *" through both 2026 changes on
// a driven clock: the night of the spring change enqueues one event, at the
// end of the gap, and the night of the autumn change one, at the first
// 02:30; every worker computes the same event id, and each is one row.
func TestPeriodicDaylightSavingEnqueuesOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := newStore(t, drv)
		p := framework.Periodic{Name: "paris", Schedule: "TZ=Europe/Paris 30 2 * * *", Kind: "paris", Missed: framework.MissedSkip}
		var want []string
		for _, night := range []struct{ from, to, firing string }{
			{"2026-03-28T22:00:00Z", "2026-03-29T04:00:00Z", "paris:2026-03-29T01:00:00Z"},
			{"2026-10-24T22:00:00Z", "2026-10-25T04:00:00Z", "paris:2026-10-25T00:30:00Z"},
		} {
			clk := newFakeClock(utc(t, night.from))
			workers := []*scheduled{startScheduled(t, s, clk, p), startScheduled(t, s, clk, p)}
			clk.awaitSleepers(t, len(workers))
			for at := utc(t, night.from); !at.After(utc(t, night.to)); at = at.Add(10 * time.Minute) {
				clk.Set(at)
				clk.awaitSleepers(t, len(workers))
			}
			inserted := map[string]int{} // event id -> workers that inserted it
			for _, sw := range workers {
				sw.stop()
				var fired []string
				for len(sw.fired) > 0 {
					f := <-sw.fired
					if f.err != nil {
						t.Fatalf("worker %s: firing %s: %v", sw.w.ID(), f.eventID, f.err)
					}
					if !f.duplicate {
						inserted[f.eventID]++
					}
					fired = append(fired, f.eventID)
				}
				if !slices.Equal(fired, []string{night.firing}) {
					t.Errorf("worker %s fired %q in the night of %s; want only %q", sw.w.ID(), fired, night.from[:10], night.firing)
				}
			}
			if !maps.Equal(inserted, map[string]int{night.firing: 1}) {
				t.Errorf("workers inserted %v; want %s once, by one worker", inserted, night.firing)
			}
			want = append(want, night.firing)
		}
		if got := periodicRows(t, s, "paris"); !slices.Equal(got, want) {
			t.Fatalf("rows %q; want one per night, %q", got, want)
		}
	})
}
