package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestMain doubles as the worker process: the supervisor re-executes the
// test binary, as it re-executes the example's own binary.
func TestMain(m *testing.M) {
	if os.Getenv(envRole) == roleWorker {
		os.Exit(workerMain())
	}
	pgtest.Main(m)
}

// The program itself, as `go run .` runs it (on the tests' PostgreSQL):
// two workers killed with SIGKILL, each with its orders at the planned
// points, and a third that finishes. The tables, read here with the test's
// own statements, hold each effect once; the steps' generations show where
// each kill fell; the declined order is FAILED with one release.
func TestRun(t *testing.T) {
	ctx := t.Context()
	o := options{dsn: pgtest.DSN(t), schema: pgtest.SchemaName(), timeout: 2 * time.Minute}
	drv := lwpgx.New()
	store, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: o.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.DropSchema(context.Background()); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	var out bytes.Buffer
	rep, err := run(ctx, o, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}

	// The kills: each worker died of SIGKILL (run checks it) with exactly
	// the orders of its round parked, at their points, in that round's
	// generation.
	if len(rep.kills) != 2 {
		t.Fatalf("%d kills; want 2", len(rep.kills))
	}
	for i, k := range rep.kills {
		if len(k.parked) != len(killPlan[i]) {
			t.Errorf("kill %d: %d orders parked; want %d", i+1, len(k.parked), len(killPlan[i]))
		}
		for id, at := range killPlan[i] {
			if got := k.parked[id]; got.at != at || got.generation != int64(i+1) {
				t.Errorf("kill %d: order %s parked %q at generation %d; want %q at generation %d", i+1, id, got.at, got.generation, at, i+1)
			}
		}
	}

	// Where each kill fell, as the event rows recorded it: which claim
	// recorded each step, and which one finished the event.
	type stepAt struct {
		name string
		gen  int64
	}
	wantRows := map[string]struct {
		status leasework.Status
		gen    int64
		steps  []stepAt
	}{
		// killed after reserve (1), after charge (2); ships and completes (3)
		"1001": {leasework.StatusDone, 3, []stepAt{{"reserve", 1}, {"charge", 2}, {"ship", 3}}},
		// killed after the provider charged, charge unrecorded (1); charged
		// again with the same key, ships, killed after ship (2); completes (3)
		"1002": {leasework.StatusDone, 3, []stepAt{{"reserve", 1}, {"charge", 2}, {"ship", 2}}},
		// killed after reserve (1); declined, releases, killed after release
		// (2); declined again, release not run again, FAILED (3)
		"1003": {leasework.StatusFailed, 3, []stepAt{{"reserve", 1}, {"release", 2}}},
		// killed after ship (1); completes without running a step (2)
		"1004": {leasework.StatusDone, 2, []stepAt{{"reserve", 1}, {"charge", 1}, {"ship", 1}}},
	}
	effectTable := map[string]string{"reserve": "reservations", "ship": "shipments", "release": "releases"}
	q := lease.QuoteIdent(o.schema) + "."
	db := store.DB()
	for _, ord := range demoOrders {
		want := wantRows[ord.ID]
		row, err := store.GetByEventID(ctx, ord.eventID())
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != want.status || row.Generation != want.gen {
			t.Errorf("order %s: %s at generation %d; want %s at generation %d", ord.ID, row.Status, row.Generation, want.status, want.gen)
		}
		var got []stepAt
		for _, st := range row.Steps {
			got = append(got, stepAt{st.Name, st.Generation})
		}
		if !slices.Equal(got, want.steps) {
			t.Errorf("order %s: steps recorded %v; want %v", ord.ID, got, want.steps)
		}
		// Each step's effect: one row, made by the claim that recorded the
		// step (they committed together).
		for _, st := range row.Steps {
			table, ok := effectTable[st.Name]
			if !ok {
				continue
			}
			var n int
			var gen int64
			if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(max(generation), 0) FROM `+q+table+` WHERE order_id = $1`, ord.ID).Scan(&n, &gen); err != nil {
				t.Fatal(err)
			}
			if n != 1 || gen != st.Generation {
				t.Errorf("order %s: %d rows in %s, by generation %d; want 1, by generation %d (the step's)", ord.ID, n, table, gen, st.Generation)
			}
		}
		// Steps not recorded made no effect.
		for name, table := range effectTable {
			if slices.ContainsFunc(row.Steps, func(st lease.StepRecord) bool { return st.Name == name }) {
				continue
			}
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+q+table+` WHERE order_id = $1`, ord.ID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("order %s: %d rows in %s, without a %s step", ord.ID, n, table, name)
			}
		}
		// The provider: one payment per order, however often it was called.
		var payments, calls int
		var outcome string
		if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(calls), 0), coalesce(max(outcome), '') FROM `+q+`payments WHERE order_id = $1`, ord.ID).Scan(&payments, &calls, &outcome); err != nil {
			t.Fatal(err)
		}
		wantOutcome, wantCalls := "charged", 1
		switch ord.ID {
		case "1002":
			wantCalls = 2 // killed once between the provider's charge and the step's record
		case "1003":
			wantOutcome, wantCalls = "declined", 2 // asked by generations 2 and 3, declined both times
		}
		if payments != 1 || outcome != wantOutcome || calls != wantCalls {
			t.Errorf("order %s: %d payments, %s, after %d calls; want 1 payment, %s, after %d calls", ord.ID, payments, outcome, calls, wantOutcome, wantCalls)
		}
		if ord.ID == "1003" && !strings.Contains(row.LastError, "card declined") {
			t.Errorf("order 1003: last error %q; want the decline", row.LastError)
		}
	}
	stock, err := readStock(ctx, store, tablesIn(o.schema))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"widget": 5, "gadget": 4, "gizmo": 3}; !maps.Equal(stock, want) {
		t.Errorf("stock %v; want %v", stock, want)
	}

	text := out.String()
	for _, want := range []string{
		"SIGKILL: worker-1 died, holding 4 claims",
		"SIGKILL: worker-2 died, holding 3 claims",
		"[worker-3] stopped gracefully",
		"[worker-2] order 1002 generation 2: the provider answered ch_",
		"[worker-3] order 1003 generation 3: release recorded by an earlier attempt, not run again",
		"every effect applied once; the declined order released once and FAILED",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The summary's check can fail: a step run twice shows as a second
	// row, and the summary reports the order.
	if _, err := db.ExecContext(ctx, `INSERT INTO `+q+`reservations (order_id, sku, qty, event_id, generation)
		SELECT order_id, sku, qty, event_id, generation FROM `+q+`reservations WHERE order_id = '1001'`); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	err = summarize(ctx, &printer{w: &again}, store, tablesIn(o.schema), demoOrders)
	if !errors.Is(err, errNotOnce) || !strings.Contains(err.Error(), "1001") || !strings.Contains(again.String(), "reserved 2") {
		t.Errorf("summary with order 1001 reserved twice: %v; want errNotOnce naming 1001\n%s", err, again.String())
	}
}
