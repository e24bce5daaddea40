package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// A keyed runner runs every event once, each key's one at a time and in the
// order enqueued, through each driver, calls its hooks in order, and leaves
// no schema behind. Within a key, row ids grow in the order enqueued (the
// enqueue inserts a key's events in the order given), so a key's claims
// must come in growing ids.
func TestKeyedRunners(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		keys, n int // n not a multiple of keys: some keys get one event more
	}{
		{keyedManyKeys, 2345},
		{keyedHotKeys, 345},
	} {
		for _, drv := range []string{"pgx", "pq"} {
			t.Run(fmt.Sprintf("%s/keys=%d", drv, tc.keys), func(t *testing.T) {
				var (
					mu       sync.Mutex
					running  = map[string]bool{}  // key → a handler of it is running
					lastID   = map[string]int64{} // key → the last row id handled
					perKey   = map[string]int{}
					eventIDs = map[string]bool{}
					problems []string
					calls    []string
				)
				problem := func(format string, args ...any) {
					if len(problems) < 10 {
						problems = append(problems, fmt.Sprintf(format, args...))
					}
				}
				handler := leasework.HandlerFunc(func(_ context.Context, c *leasework.Claim) error {
					mu.Lock()
					switch {
					case c.Key == "":
						problem("event %d has no key", c.ID)
					case running[c.Key]:
						problem("key %s: event %d started while another of the key ran", c.Key, c.ID)
					case c.ID <= lastID[c.Key]:
						problem("key %s: event %d after event %d", c.Key, c.ID, lastID[c.Key])
					}
					if eventIDs[c.EventID] || c.Attempt != 1 {
						problem("event %d (%s) handled again, attempt %d", c.ID, c.EventID, c.Attempt)
					}
					running[c.Key], lastID[c.Key] = true, c.ID
					perKey[c.Key]++
					eventIDs[c.EventID] = true
					mu.Unlock()
					// A handler's work would run here, with the key marked running.
					mu.Lock()
					running[c.Key] = false
					mu.Unlock()
					return nil
				})
				hook := func(name string) func(context.Context) error {
					return func(context.Context) error { calls = append(calls, name); return nil }
				}
				run := leaseworkRunner(drv, lwShape{Keys: tc.keys})
				res, err := run(ctx, e, tc.n, runHooks{Handler: handler, Before: hook("before"), After: hook("after"), Stopped: hook("stopped")})
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range problems {
					t.Error(p)
				}
				if res.Jobs != tc.n || res.Elapsed <= 0 {
					t.Errorf("result %+v, want %d jobs in a positive time", res, tc.n)
				}
				if len(eventIDs) != tc.n {
					t.Errorf("%d events handled, want %d", len(eventIDs), tc.n)
				}
				if len(perKey) != tc.keys {
					t.Errorf("%d keys handled, want %d", len(perKey), tc.keys)
				}
				for k := range tc.keys {
					want := tc.n / tc.keys
					if k < tc.n%tc.keys {
						want++
					}
					if got := perKey["k"+strconv.Itoa(k)]; got != want {
						t.Errorf("key k%d: %d events handled, want %d", k, got, want)
					}
				}
				if strings.Join(calls, ",") != "before,after,stopped" {
					t.Errorf("hooks called %v, want before, after, stopped", calls)
				}
			})
		}
	}
	assertNoBenchSchemas(t, e)
}

// A -quick run of the section, two rounds of few events, prints every row
// with a figure in each cell and each row's ratio to the keyless row of its
// driver. Speed is reported, never asserted.
func TestKeyedSection(t *testing.T) {
	e := testEnv(t)
	e.rounds = 2
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	tables, err := keyed(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("%d tables, want 1", len(tables))
	}
	tb := tables[0]
	wantHeader := []string{"system", "configuration", "events", "round 1", "round 2", "median", "÷ keyless, same driver"}
	if strings.Join(tb.header, "|") != strings.Join(wantHeader, "|") {
		t.Errorf("header %q, want %q", tb.header, wantHeader)
	}
	jobs, _ := sizes(e)
	wantRows := [][2]string{ // label, events
		{"leasework pgx, keyless", thousands(float64(jobs))},
		{"leasework pgx, 1,000 keys", thousands(float64(jobs))},
		{"leasework pgx, 10 keys", thousands(float64(keyedHotEvents(jobs)))},
		{"leasework pq, keyless", thousands(float64(jobs))},
		{"leasework pq, 1,000 keys", thousands(float64(jobs))},
		{"leasework pq, 10 keys", thousands(float64(keyedHotEvents(jobs)))},
	}
	if len(tb.rows) != len(wantRows) {
		t.Fatalf("%d rows, want %d", len(tb.rows), len(wantRows))
	}
	keyless := map[string]float64{}
	for i, r := range tb.rows {
		if len(r) != len(tb.header) {
			t.Errorf("row %v has %d cells for %d columns", r, len(r), len(tb.header))
			continue
		}
		for j, c := range r {
			if c == "" {
				t.Errorf("row %v: %q is empty", r, tb.header[j])
			}
		}
		if r[0] != wantRows[i][0] || r[2] != wantRows[i][1] {
			t.Errorf("row %d: %q with %s events, want %q with %s", i, r[0], r[2], wantRows[i][0], wantRows[i][1])
		}
		medianRate, err1 := strconv.ParseFloat(strings.ReplaceAll(r[5], ",", ""), 64)
		ratio, err2 := strconv.ParseFloat(r[6], 64)
		if err1 != nil || err2 != nil || medianRate <= 0 || ratio <= 0 {
			t.Errorf("row %v: median %q, ratio %q", r, r[5], r[6])
			continue
		}
		drv := strings.TrimSuffix(strings.Fields(r[0])[1], ",")
		if strings.HasSuffix(r[0], "keyless") {
			keyless[drv] = medianRate
			if r[6] != "1.00" {
				t.Errorf("row %v: ratio %s, want 1.00", r, r[6])
			}
		} else if want := medianRate / keyless[drv]; ratio-want > 0.01 || want-ratio > 0.01 {
			// The medians are printed rounded to whole jobs/s.
			t.Errorf("row %v: ratio %s, want about %.2f (median ÷ the %s keyless median)", r, r[6], want, drv)
		}
	}
	if len(tb.notes) == 0 || !strings.HasPrefix(tb.notes[0], "goal: keyed over 1,000 keys") {
		t.Errorf("notes %q do not begin with the goal", tb.notes)
	}
	assertNoBenchSchemas(t, e)
}
