package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A -quick run of the section, two rounds of few events, prints every row
// with a figure in each cell and each row's ratio to the row without steps
// of its driver. Speed is reported, never asserted.
func TestStepsSection(t *testing.T) {
	e := testEnv(t)
	e.jobs, e.rounds = 200, 2
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	tables, err := steps(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 {
		t.Fatalf("%d tables, want 1", len(tables))
	}
	tb := tables[0]
	wantHeader := []string{"system", "configuration", "round 1", "round 2", "median", "÷ no steps, same driver"}
	if strings.Join(tb.header, "|") != strings.Join(wantHeader, "|") {
		t.Errorf("header %q, want %q", tb.header, wantHeader)
	}
	wantRows := []string{
		"leasework pgx, no steps", "leasework pgx, 1 Step", "leasework pgx, 3 Steps", "leasework pgx, 3 StepTx",
		"leasework pq, no steps", "leasework pq, 1 Step", "leasework pq, 3 Steps", "leasework pq, 3 StepTx",
	}
	if len(tb.rows) != len(wantRows) {
		t.Fatalf("%d rows, want %d", len(tb.rows), len(wantRows))
	}
	none := map[string]float64{}
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
		if r[0] != wantRows[i] {
			t.Errorf("row %d: %q, want %q", i, r[0], wantRows[i])
		}
		medianRate, err1 := strconv.ParseFloat(strings.ReplaceAll(r[4], ",", ""), 64)
		ratio, err2 := strconv.ParseFloat(r[5], 64)
		if err1 != nil || err2 != nil || medianRate <= 0 || ratio <= 0 {
			t.Errorf("row %v: median %q, ratio %q", r, r[4], r[5])
			continue
		}
		drv := strings.TrimSuffix(strings.Fields(r[0])[1], ",")
		if strings.HasSuffix(r[0], "no steps") {
			none[drv] = medianRate
			if r[5] != "1.00" {
				t.Errorf("row %v: ratio %s, want 1.00", r, r[5])
			}
		} else if want := medianRate / none[drv]; ratio-want > 0.01 || want-ratio > 0.01 {
			// The medians are printed rounded to whole jobs/s.
			t.Errorf("row %v: ratio %s, want about %.2f (median ÷ the %s median without steps)", r, r[5], want, drv)
		}
	}
	if len(tb.notes) == 0 || !strings.HasPrefix(tb.notes[0], "goal: none set; reported") {
		t.Errorf("notes %q do not begin with the goal", tb.notes)
	}
	assertNoBenchSchemas(t, e)
}

// The check after each run fails when the events' steps are not the
// row's (here, events run by a handler without steps, checked for one),
// and counts the events that took more than one attempt.
func TestCheckSteps(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const n = 20
	lt, err := newLWTable(ctx, e, "pgx", lwShape{}, n)
	if err != nil {
		t.Fatal(err)
	}
	defer lt.close(e)
	if _, err := lt.work(ctx, lwShape{}, n, runHooks{}); err != nil {
		t.Fatal(err)
	}
	if again, err := lt.checkSteps(ctx, 0, n); err != nil || again != 0 {
		t.Errorf("events without steps, checked for none: %d run again, %v; want 0, no error", again, err)
	}
	if _, err := lt.checkSteps(ctx, 1, n); err == nil {
		t.Error("events without steps, checked for one: no error")
	}
	// As if the first event's first attempt had failed.
	if _, err := lt.store.DB().ExecContext(ctx, `UPDATE `+lt.store.QualifiedTable()+` SET attempt = 2 WHERE id = (SELECT min(id) FROM `+lt.store.QualifiedTable()+`)`); err != nil {
		t.Fatal(err)
	}
	if again, err := lt.checkSteps(ctx, 0, n); err != nil || again != 1 {
		t.Errorf("one event at its second attempt: %d run again, %v; want 1, no error", again, err)
	}
}
