package main

import (
	"context"
	"testing"
	"time"
)

// The pressure section in its quick form: every system runs every phase,
// every event it produced finishes (as its table counts them), and the
// tables are complete.
func TestPressure(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	phases := pressurePhases(true)
	var runs []pressureRun
	for _, open := range pressureSystems {
		run, err := runPressure(ctx, e, open)
		if err != nil {
			t.Fatalf("%s: %v", run.label, err)
		}
		if len(run.rows) != len(phases) {
			t.Errorf("%s: %d phases, want %d", run.label, len(run.rows), len(phases))
		}
		var enqueued int64
		for _, r := range run.rows {
			enqueued += r.enqueued
			if r.totalBytes <= 0 || r.indexBytes <= 0 {
				t.Errorf("%s: %s: sizes %d and %d, want positive", run.label, r.phase.name, r.totalBytes, r.indexBytes)
			}
		}
		if run.enqueued == 0 || run.finished != run.enqueued || enqueued != run.enqueued {
			t.Errorf("%s: %d enqueued (%d over the phases), %d finished in the table", run.label, run.enqueued, enqueued, run.finished)
		}
		for _, r := range run.rows {
			if r.phase.name != "" && r.picked != int(r.enqueued) {
				t.Errorf("%s: %s: %d pickups timed of %d enqueued", run.label, r.phase.name, r.picked, r.enqueued)
			}
		}
		runs = append(runs, run)
	}
	tables := pressureTables(e, runs)
	if len(tables) != len(pressureSystems)+1 {
		t.Fatalf("%d tables, want one per system and a comparison", len(tables))
	}
	for _, tb := range tables {
		if len(tb.rows) != len(phases) {
			t.Errorf("%q: %d rows, want %d", tb.title, len(tb.rows), len(phases))
		}
		for _, row := range tb.rows {
			if len(row) != len(tb.header) {
				t.Errorf("%q: row %v has %d cells, want %d", tb.title, row, len(row), len(tb.header))
			}
			for i, c := range row {
				if c == "" {
					t.Errorf("%q: row %v: %s empty", tb.title, row[0], tb.header[i])
				}
			}
		}
	}
	assertNoBenchSchemas(t, e)
}

func TestExecutionTime(t *testing.T) {
	d, err := executionTime("Limit  (cost=0.1..2 rows=1)\n Planning Time: 0.050 ms\n Execution Time: 1.250 ms\n")
	if err != nil || d != 1250*time.Microsecond {
		t.Errorf("executionTime: %v, %v; want 1.25ms", d, err)
	}
	if _, err := executionTime("Seq Scan"); err == nil {
		t.Error("executionTime of a plan without one: no error")
	}
}
