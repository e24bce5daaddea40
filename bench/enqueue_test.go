package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every system of the enqueue section writes the business row and the
// events of a transaction, and nothing else: the counts the section checks
// its runs by are the tables' rows. leasework's events carry the stable ids
// and keys the section gives them.
func TestEnqueueTargets(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, row := range enqueueRows([]int{1, 3}) {
		t.Run(row.name(), func(t *testing.T) {
			target, err := row.open(ctx, e, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer target.close(e)
			call, err := target.tx(ctx, row.perTx)
			if err != nil {
				t.Fatal(err)
			}
			none, err := target.tx(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if call <= 0 || none != 0 {
				t.Errorf("the enqueue call took %v with %d events and %v with none; want a time and zero", call, row.perTx, none)
			}
			events, orders, err := target.stored(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if events != int64(row.perTx) || orders != 2 {
				t.Errorf("after a transaction of %d events and one of none: %d events, %d business rows; want %d and 2", row.perTx, events, orders, row.perTx)
			}
			lw, ok := target.(*lwEnqueue)
			if !ok {
				return
			}
			for j := range row.perTx {
				r, err := lw.store.GetByEventID(ctx, "order-1-"+strconv.Itoa(j))
				if err != nil {
					t.Fatalf("event %d of the first order: %v", j, err)
				}
				wantKey := ""
				if row.keyed {
					wantKey = "key-" + strconv.Itoa(row.perTx+j) // event number order×perTx + j, order 1
				}
				if r.Key != wantKey || string(r.Payload) != `{"num":`+strconv.Itoa(row.perTx+j)+`}` {
					t.Errorf("event %d of the first order: key %q, payload %s; want key %q", j, r.Key, r.Payload, wantKey)
				}
			}
		})
	}
	assertNoBenchSchemas(t, e)
}

// A -quick run of the section prints every row with a figure in each cell,
// and each of its runs found every event it committed in the table (a run
// fails otherwise). Speed is reported, never asserted.
func TestEnqueueSection(t *testing.T) {
	e := testEnv(t)
	e.producers = 2
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	tables, err := enqueueSection(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 {
		t.Fatalf("%d tables, want the events/s table and the latency table", len(tables))
	}
	want := [2]int{len(enqueueRows(enqueueBatchesQuick)), len(enqueueRows([]int{1}))}
	for i, tb := range tables {
		if len(tb.rows) != want[i] {
			t.Errorf("%s: %d rows, want %d", tb.title, len(tb.rows), want[i])
		}
		for _, r := range tb.rows {
			if len(r) != len(tb.header) {
				t.Errorf("%s: row %v has %d cells for %d columns", tb.title, r, len(r), len(tb.header))
				continue
			}
			for j, c := range r {
				if c == "" {
					t.Errorf("%s: row %v: %q is empty", tb.title, r, tb.header[j])
				}
			}
		}
	}
	// Every median events/s is above zero.
	events := tables[0]
	col := len(events.header) - 3
	for _, r := range events.rows {
		rate, err := strconv.ParseFloat(strings.ReplaceAll(r[col], ",", ""), 64)
		if err != nil || rate <= 0 {
			t.Errorf("row %v: median events/s %q", r, r[col])
		}
	}
	assertNoBenchSchemas(t, e)
}
