package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestListFailedShowsLastError(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	reason := "handler panicked: connection reset by peer\n\tgoroutine 7 [running]:\n" + strings.Repeat("frame ", 40)
	id := failed(t, st, "email", reason)
	pgtest.Enqueue(t, st, lease.Event{Kind: "email"}) // READY, not listed

	r := must(t, exitOK, on(t, st, "pgx", "list", "-status", "FAILED", "-json")...)
	var got listJSON
	decode(t, r, &got)
	if len(got.Rows) != 1 || got.NextAfter != nil {
		t.Fatalf("list -status FAILED = %+v; want one row, no next page", got)
	}
	row := got.Rows[0]
	if row.ID != id || row.Status != "FAILED" || row.Kind != "email" || row.Generation != 1 ||
		row.Attempt != 1 || row.MaxAttempts != 1 || row.LeaseUntil != nil || row.FinishedAt == nil {
		t.Fatalf("row = %+v", row)
	}
	if row.LastError != reason {
		t.Fatalf("-json last_error = %q; want the whole error %q", row.LastError, reason)
	}
	if row.EventID == "" || row.NextAttemptAt.IsZero() || row.CreatedAt.IsZero() {
		t.Fatalf("row lacks event id or times: %+v", row)
	}

	// The table: a header, one line per row, the error cut short on one line.
	r = must(t, exitOK, on(t, st, "pgx", "list", "-status", "failed")...) // case does not matter
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("table has %d lines; want a header and one row:\n%s", len(lines), r.stdout)
	}
	for _, col := range []string{"ID", "EVENT ID", "KIND", "KEY", "STATUS", "GEN", "ATTEMPT", "LEASE UNTIL", "NEXT ATTEMPT", "LAST ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks column %q", lines[0], col)
		}
	}
	fields := strings.Fields(lines[1])
	if fields[0] != strconv.FormatInt(id, 10) || fields[1] != row.EventID || fields[2] != "email" || fields[3] != "-" ||
		fields[4] != "FAILED" || fields[5] != "1" || fields[6] != "1/1" || fields[7] != "-" {
		t.Errorf("row line = %q", lines[1])
	}
	if !strings.Contains(lines[1], "handler panicked: connection reset by peer goroutine 7") || !strings.HasSuffix(lines[1], "...") {
		t.Errorf("row line does not show the error flattened and cut short: %q", lines[1])
	}
	if want := "finished " + row.FinishedAt.UTC().Format("2006-01-02 15:04:05Z"); !strings.Contains(lines[1], want) {
		t.Errorf("the FAILED row's line does not say when it finished (%q): %q", want, lines[1])
	}
	if strings.Contains(lines[1], strings.Repeat("frame ", 20)) {
		t.Errorf("row line shows the whole error: %q", lines[1])
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t, pgtest.Drivers[1].New(), lease.Options{})
	var ids []int64
	for i := range 5 {
		kind := "a"
		if i%2 == 1 {
			kind = "b"
		}
		ids = append(ids, pgtest.Enqueue(t, st, lease.Event{Kind: kind, EventID: "ev-" + strconv.Itoa(i)})[0].ID)
	}
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Hour})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %+v, %v", claims, err)
	}

	list := func(args ...string) listJSON {
		t.Helper()
		var got listJSON
		decode(t, must(t, exitOK, on(t, st, "pq", append([]string{"list", "-json"}, args...)...)...), &got)
		return got
	}
	idsOf := func(l listJSON) []int64 {
		var out []int64
		for _, r := range l.Rows {
			out = append(out, r.ID)
		}
		return out
	}

	// Pages of two: next_after chains them, and the last page has none.
	var seen []int64
	after := "0"
	for page := 0; ; page++ {
		got := list("-limit", "2", "-after", after)
		seen = append(seen, idsOf(got)...)
		if got.NextAfter == nil {
			break
		}
		if page > 5 {
			t.Fatal("paging does not end")
		}
		after = strconv.FormatInt(*got.NextAfter, 10)
	}
	if !slices.Equal(seen, ids) {
		t.Fatalf("paged ids = %v; want %v", seen, ids)
	}

	if got := idsOf(list("-kind", "b")); !slices.Equal(got, []int64{ids[1], ids[3]}) {
		t.Errorf("-kind b = %v; want %v", got, []int64{ids[1], ids[3]})
	}
	got := list("-status", "INPROGRESS")
	if len(got.Rows) != 1 || got.Rows[0].ID != claims[0].ID || got.Rows[0].LeaseUntil == nil || got.Rows[0].Generation != 1 {
		t.Errorf("-status INPROGRESS = %+v; want the claimed row with its lease", got.Rows)
	}
	if got := list("-status", "DONE"); got.Rows == nil || len(got.Rows) != 0 {
		t.Errorf("-status DONE = %+v; want an empty list, not null", got)
	}

	// The table says when a page was full, and when nothing matched.
	r := must(t, exitOK, on(t, st, "pq", "list", "-limit", "2")...)
	if !strings.Contains(r.stdout, "-after "+strconv.FormatInt(ids[1], 10)) {
		t.Errorf("full page does not say how to get the next:\n%s", r.stdout)
	}
	r = must(t, exitOK, on(t, st, "pq", "list", "-kind", "nope")...)
	if strings.TrimSpace(r.stdout) != "no rows" {
		t.Errorf("empty table printed %q; want \"no rows\"", r.stdout)
	}
}
