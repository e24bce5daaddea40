package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
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
	for _, col := range []string{"ID", "EVENT ID", "KIND", "KEY", "PARTITION", "STATUS", "GEN", "ATTEMPT", "LEASE UNTIL", "NEXT ATTEMPT", "LAST ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks column %q", lines[0], col)
		}
	}
	fields := strings.Fields(lines[1])
	if fields[0] != strconv.FormatInt(id, 10) || fields[1] != row.EventID || fields[2] != "email" || fields[3] != "-" || fields[4] != "-" ||
		fields[5] != "FAILED" || fields[6] != "1" || fields[7] != "1/1" || fields[8] != "-" {
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

// list -id shows one row, every field in full, and why it is not running,
// one reason a line, or what becomes of it when nothing holds it back;
// with -json, the row and the reasons with their figures.
func TestListOneRowSaysWhy(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			one := func(id int64, args ...string) result {
				return must(t, exitOK, on(t, st, d.Name, append([]string{"list", "-id", strconv.FormatInt(id, 10)}, args...)...)...)
			}
			// field returns the value printed for label: the rest of its line.
			field := func(out, label string) string {
				for line := range strings.SplitSeq(out, "\n") {
					if rest, ok := strings.CutPrefix(line, label+" "); ok {
						return strings.TrimSpace(rest)
					}
				}
				t.Errorf("no line %q in:\n%s", label, out)
				return ""
			}

			if _, err := st.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 1}, "test"); err != nil {
				t.Fatal(err)
			}
			mail := pgtest.Enqueue(t, st, lease.Event{Kind: "send-email", EventID: "mail-1"}, lease.Event{Kind: "send-email", EventID: "mail-2"})
			claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Worker: "w-1"})
			if err != nil || len(claims) != 1 || claims[0].ID != mail[0].ID {
				t.Fatalf("claim = %+v, %v; want the first mail", claims, err)
			}

			r := one(mail[1].ID)
			for label, want := range map[string]string{
				"id": strconv.FormatInt(mail[1].ID, 10), "event id": "mail-2", "kind": "send-email", "queue": "default",
				"status": "READY", "attempt": "0/25", "key": "-", "lease until": "-",
				"why not running": "held by concurrency limit kind:send-email (1/1 live): it starts when one of those attempts ends, or the limit is raised or cleared",
			} {
				if got := field(r.stdout, label); got != want {
					t.Errorf("list -id: %s = %q; want %q", label, got, want)
				}
			}
			var js oneRowJSON
			decode(t, one(mail[1].ID, "-json"), &js)
			if js.Row.ID != mail[1].ID || js.Row.EventID != "mail-2" || len(js.Why) != 1 {
				t.Fatalf("list -id -json = %+v; want the row and one reason", js)
			}
			if w := js.Why[0]; w.Kind != "limit" || w.Scope != "kind" || w.Name != "send-email" || w.Live == nil || *w.Live != 1 ||
				w.Max == nil || *w.Max != 1 || !strings.HasPrefix(w.Text, "held by concurrency limit kind:send-email (1/1 live)") {
				t.Errorf("list -id -json reason = %+v", w)
			}

			// Running.
			r = one(mail[0].ID)
			if got, want := field(r.stdout, "why not running"), "it runs while its lease does (until "+claims[0].LeaseUntil.UTC().Format("2006-01-02 15:04:05Z")+")"; !strings.HasPrefix(got, want) {
				t.Errorf("list -id of a running row says %q; want it to start %q", got, want)
			}
			if field(r.stdout, "worker") != "w-1" {
				t.Errorf("list -id of a running row:\n%s", r.stdout)
			}
			decode(t, one(mail[0].ID, "-json"), &js)
			if js.Why == nil || len(js.Why) != 0 {
				t.Errorf("list -id -json of a running row: why = %#v; want []", js.Why)
			}

			// Behind its key's FAILED head, in a paused queue: a line each.
			head := pgtest.Enqueue(t, st, lease.Event{Kind: "sync", Key: "customer-7", MaxAttempts: 1})[0].ID
			hc, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"sync"}})
			if err != nil || len(hc) != 1 || hc[0].ID != head {
				t.Fatalf("claim of the head = %+v, %v", hc, err)
			}
			if _, err := st.Write(ctx, lease.Fail(hc[0].Ref(), "remote down\nretry later")); err != nil {
				t.Fatal(err)
			}
			behind := pgtest.Enqueue(t, st, lease.Event{Kind: "sync", Key: "customer-7"})[0].ID
			if _, err := st.PauseQueue(ctx, lease.DefaultQueue); err != nil {
				t.Fatal(err)
			}
			r = one(behind)
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			last := lines[len(lines)-2:]
			if !strings.HasPrefix(last[0], "why not running ") || !strings.Contains(last[0], "queue default is paused (since ") ||
				strings.TrimSpace(last[1]) != fmt.Sprintf(`waiting for key "customer-7", held by its head, event %d, FAILED: it holds the key until it is requeued or discarded`, head) {
				t.Errorf("list -id of a row behind a FAILED head in a paused queue ends:\n%s", strings.Join(last, "\n"))
			}
			decode(t, one(behind, "-json"), &js)
			if len(js.Why) != 2 || js.Why[0].Kind != "paused" || js.Why[0].Queue != "default" || js.Why[0].PausedAt == nil ||
				js.Why[1].Kind != "key" || js.Why[1].Key != "customer-7" || js.Why[1].HeadID == nil || *js.Why[1].HeadID != head ||
				js.Why[1].HeadStatus != "FAILED" || js.Why[1].Ahead == nil || *js.Why[1].Ahead != 0 {
				t.Errorf("list -id -json of the row behind = %+v", js.Why)
			}

			// The FAILED head: its whole error, and the repairs.
			r = one(head)
			if got := field(r.stdout, "last error"); got != "remote down retry later" {
				t.Errorf("list -id: last error = %q; want the whole error on one line", got)
			}
			if got, want := field(r.stdout, "why not running"), fmt.Sprintf("it FAILED: requeue it (leasework requeue -id %d) or discard it (leasework discard -id %d -generation %d)", head, head, hc[0].Generation); got != want {
				t.Errorf("list -id of a FAILED row says %q; want %q", got, want)
			}

			// Nothing holds it: what takes it.
			if _, err := st.ResumeQueue(ctx, lease.DefaultQueue); err != nil {
				t.Fatal(err)
			}
			free := pgtest.Enqueue(t, st, lease.Event{Kind: "report", Queue: "bulk"})[0].ID
			if got, want := field(one(free).stdout, "why not running"), "nothing holds it back: the next claim of a worker that serves kind report in queue bulk takes it"; got != want {
				t.Errorf("list -id of a free row says %q; want %q", got, want)
			}

			// No such row: a runtime error.
			r = must(t, exitError, on(t, st, d.Name, "list", "-id", "424242")...)
			if !strings.Contains(r.stderr, "no such event") {
				t.Errorf("list -id of no row: stderr %q", r.stderr)
			}
		})
	}
}

// list -id shows the steps a handler recorded, one line each in the order
// recorded (name, the generation that recorded it, when, size, and the
// value on one line, cut short, or in hex when it is not text), and its
// output; "-" for none. -json gives them whole.
func TestListOneRowShowsStepsAndOutput(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := pgtest.Store(t, d.New(), lease.Options{})
			ev := pgtest.Enqueue(t, st, lease.Event{Kind: "order"}, lease.Event{Kind: "report"})
			claim := func() leasework.Ref {
				t.Helper()
				claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"order"}})
				if err != nil || len(claims) != 1 || claims[0].ID != ev[0].ID {
					t.Fatalf("claim = %+v, %v; want row %d", claims, err, ev[0].ID)
				}
				return claims[0].Ref()
			}
			write := func(ws ...lease.Write) {
				t.Helper()
				for _, w := range ws {
					if _, err := st.Write(ctx, w); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Generation 1 reserves and gives its claim back; generation 2
			// charges (a long result, over lines), keeps a receipt that is
			// not text, and records its output.
			long := "{\n  \"lines\": \"" + strings.Repeat("ab", 50) + "\"\n}"
			receipt := []byte{0x00, 0x01, 0xff}
			ref := claim()
			write(lease.Step(ref, "reserve", []byte(`{"sku":"x"}`)), lease.Release(ref))
			ref = claim()
			write(lease.Step(ref, "charge", []byte(long)), lease.Step(ref, "receipt", receipt),
				lease.Output(ref, []byte(`{"order":42}`)), lease.Complete(ref))
			r, err := st.Get(ctx, ev[0].ID)
			if err != nil || len(r.Steps) != 3 {
				t.Fatalf("get = %+v, %v; want 3 steps", r.Steps, err)
			}

			out := must(t, exitOK, on(t, st, d.Name, "list", "-id", strconv.FormatInt(ev[0].ID, 10))...).stdout
			lines := strings.Split(out, "\n")
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "steps ") })
			if i < 0 || i+4 >= len(lines) {
				t.Fatalf("list -id prints no steps, or not three and the output:\n%s", out)
			}
			at := func(i int) string { return r.Steps[i].At.UTC().Format("2006-01-02 15:04:05Z") }
			want := [][]string{
				{"steps", "reserve", "generation 1", at(0), "11 bytes", `{"sku":"x"}`},
				{"charge", "generation 2", at(1), fmt.Sprintf("%d bytes", len(long)), (`{ "lines": "` + strings.Repeat("ab", 50))[:previewWidth-3] + "..."},
				{"receipt", "generation 2", at(2), "3 bytes", "not text: 0001ff"},
				{"output", `12 bytes: {"order":42}`},
			}
			for j, w := range want {
				// Cells are two spaces or more apart; within a cell, one.
				got := strings.Split(strings.TrimSpace(lines[i+j]), "  ")
				got = slices.DeleteFunc(got, func(c string) bool { return c == "" })
				for k := range got {
					got[k] = strings.TrimSpace(got[k])
				}
				if !slices.Equal(got, w) {
					t.Errorf("list -id line %q: cells %q; want %q", lines[i+j], got, w)
				}
			}
			// The steps' cells are aligned: each name starts in one column.
			col := strings.Index(lines[i], "reserve")
			if strings.Index(lines[i+1], "charge") != col || strings.Index(lines[i+2], "receipt") != col {
				t.Errorf("the steps' lines are not aligned:\n%s", strings.Join(lines[i:i+3], "\n"))
			}

			var js oneRowJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "list", "-id", strconv.FormatInt(ev[0].ID, 10), "-json")...), &js)
			wantJS := []stepJSON{
				{Name: "reserve", Generation: 1, At: r.Steps[0].At.UTC(), Value: []byte(`{"sku":"x"}`)},
				{Name: "charge", Generation: 2, At: r.Steps[1].At.UTC(), Value: []byte(long)},
				{Name: "receipt", Generation: 2, At: r.Steps[2].At.UTC(), Value: receipt},
			}
			if !slices.EqualFunc(js.Steps, wantJS, func(a, b stepJSON) bool {
				return a.Name == b.Name && a.Generation == b.Generation && a.At.Equal(b.At) && string(a.Value) == string(b.Value)
			}) || string(js.Output) != `{"order":42}` {
				t.Errorf("list -id -json: steps %+v, output %q; want %+v, {\"order\":42}", js.Steps, js.Output, wantJS)
			}

			// An event without steps or output.
			out = must(t, exitOK, on(t, st, d.Name, "list", "-id", strconv.FormatInt(ev[1].ID, 10))...).stdout
			for _, w := range []string{"steps", "output"} {
				if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return slices.Equal(strings.Fields(l), []string{w, "-"}) }) {
					t.Errorf("list -id of an event without %s does not say %s -:\n%s", w, w, out)
				}
			}
			decode(t, must(t, exitOK, on(t, st, d.Name, "list", "-id", strconv.FormatInt(ev[1].ID, 10), "-json")...), &js)
			if js.Steps == nil || len(js.Steps) != 0 || js.Output != nil {
				t.Errorf("list -id -json of an event without steps: steps %#v, output %q; want [] and null", js.Steps, js.Output)
			}
		})
	}
}
