package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func requeueJSONOf(t *testing.T, r result) requeueJSON {
	t.Helper()
	var got requeueJSON
	decode(t, r, &got)
	return got
}

func TestRequeueByIDResetsAttempts(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t, d.New(), lease.Options{})
			a, b := failed(t, st, "k", "boom"), failed(t, st, "k", "boom")
			other := failed(t, st, "k", "boom")
			before := get(t, st, a)

			r := must(t, exitOK, on(t, st, d.Name, "requeue", "-id", strconv.FormatInt(a, 10), "-id", strconv.FormatInt(b, 10), "-json")...)
			got := requeueJSONOf(t, r)
			if got.Count != 2 || !slices.Equal(got.Requeued, []int64{a, b}) || len(got.Skipped) != 0 {
				t.Fatalf("requeue -id %d -id %d = %+v", a, b, got)
			}
			for _, id := range []int64{a, b} {
				row := get(t, st, id)
				if row.Status != leasework.StatusReady || row.Generation <= before.Generation ||
					row.Attempt != 0 || row.MaxAttempts != 1 || row.LeaseUntil != nil || row.FinishedAt != nil {
					t.Errorf("row %d after requeue = %+v; want READY, generation > %d, attempt 0 of 1", id, row, before.Generation)
				}
			}
			if row := get(t, st, other); row.Status != leasework.StatusFailed || row.Generation != before.Generation {
				t.Errorf("row %d, not named, was changed: %+v", other, row)
			}

			// The requeued row is claimable again: the requeue and the claim
			// each grew the generation.
			claims, err := st.Claim(context.Background(), lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			if err != nil || len(claims) != 1 || claims[0].ID != a || claims[0].Generation != before.Generation+2 || claims[0].Attempt != 1 {
				t.Fatalf("claim after requeue = %+v, %v; want row %d at generation %d, attempt 1", claims, err, a, before.Generation+2)
			}
		})
	}
}

func TestRequeueExtraAttempts(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	id := failed(t, st, "k", "boom")
	r := must(t, exitOK, on(t, st, "pgx", "requeue", "-id", strconv.FormatInt(id, 10), "-extra-attempts", "3")...)
	if !strings.Contains(r.stdout, "requeued 1 row (3 more attempts each): "+strconv.FormatInt(id, 10)) {
		t.Fatalf("stdout = %q", r.stdout)
	}
	row := get(t, st, id)
	if row.Status != leasework.StatusReady || row.Attempt != 1 || row.MaxAttempts != 4 || row.Generation != 2 {
		t.Fatalf("row after requeue -extra-attempts 3 = %+v; want READY, attempt 1 of 4, generation 2", row)
	}
}

func TestRequeueByKindAndAll(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[1].New(), lease.Options{})
	mail1, mail2 := failed(t, st, "mail", "x"), failed(t, st, "mail", "x")
	sms := failed(t, st, "sms", "x")
	push := failed(t, st, "push", "x")
	ready := pgtest.Enqueue(t, st, lease.Event{Kind: "mail"})[0].ID

	got := requeueJSONOf(t, must(t, exitOK, on(t, st, "pq", "requeue", "-kind", "mail", "-json")...))
	if !slices.Equal(got.Requeued, []int64{mail1, mail2}) {
		t.Fatalf("requeue -kind mail = %+v; want %d and %d", got, mail1, mail2)
	}
	if row := get(t, st, ready); row.Generation != 0 {
		t.Errorf("a READY row of the kind was touched: %+v", row)
	}

	r := must(t, exitOK, on(t, st, "pq", "requeue", "-all")...)
	want := "requeued 2 rows (attempt count reset): " + strconv.FormatInt(sms, 10) + ", " + strconv.FormatInt(push, 10)
	if strings.TrimSpace(r.stdout) != want {
		t.Fatalf("requeue -all printed %q; want %q", r.stdout, want)
	}
	for _, id := range []int64{mail1, mail2, sms, push} {
		if row := get(t, st, id); row.Status != leasework.StatusReady || row.Generation != 2 {
			t.Errorf("row %d = %+v; want READY at generation 2", id, row)
		}
	}
}

func TestRequeueNothingMatchedExitsZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	done := pgtest.Enqueue(t, st, lease.Event{Kind: "k"})[0].ID
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %+v, %v", claims, err)
	}
	if _, err := st.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
		t.Fatal(err)
	}

	r := must(t, exitOK, on(t, st, "pgx", "requeue", "-all")...)
	if strings.TrimSpace(r.stdout) != "requeued 0 rows" {
		t.Fatalf("requeue -all with nothing FAILED printed %q", r.stdout)
	}
	r = must(t, exitOK, on(t, st, "pgx", "requeue", "-kind", "nope", "-json")...)
	if got := requeueJSONOf(t, r); got.Count != 0 || got.Requeued == nil || len(got.Requeued) != 0 {
		t.Fatalf("requeue -kind nope -json = %+v; want count 0 and an empty list", got)
	}

	// Rows named by id that were not requeued are reported with the reason.
	missing := done + 1000
	r = must(t, exitOK, on(t, st, "pgx", "requeue", "-id", strconv.FormatInt(done, 10)+","+strconv.FormatInt(missing, 10), "-json")...)
	got := requeueJSONOf(t, r)
	want := []skippedJSON{{ID: done, Reason: "not FAILED", Status: "DONE"}, {ID: missing, Reason: "not found"}}
	if got.Count != 0 || !slices.Equal(got.Skipped, want) {
		t.Fatalf("requeue of a DONE and a missing row = %+v; want skipped %+v", got, want)
	}
	r = must(t, exitOK, on(t, st, "pgx", "requeue", "-id", strconv.FormatInt(done, 10))...)
	if !strings.Contains(r.stdout, "requeued 0 rows") || !strings.Contains(r.stdout, "it is DONE, not FAILED") {
		t.Fatalf("requeue of a DONE row printed %q", r.stdout)
	}
	if row := get(t, st, done); row.Status != leasework.StatusDone || row.Generation != 1 {
		t.Fatalf("DONE row was changed: %+v", row)
	}
}
