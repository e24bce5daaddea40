package lease_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// "Was it cancelled?" is data, not a reading of the last error: a FAILED
// event whose handler's error happens to read like a cancel's, then
// discarded, was not cancelled, and a late write of its last owner is a
// plain stale one; a cancelled event's is told it was cancelled.
func TestCancelledIsRecordedNotReadFromTheError(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "failed"}, lease.Event{Kind: "k", EventID: "cancelled"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
		if err != nil || len(claims) != 2 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		byEvent := map[string]leasework.Claim{}
		for _, c := range claims {
			byEvent[c.EventID] = c
		}
		failed, cancelled := byEvent["failed"], byEvent["cancelled"]
		// The upstream service's own words.
		reason := "cancelled: upstream refused the order"
		if _, err := s.Write(ctx, lease.Fail(failed.Ref(), reason)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Discard(ctx, failed.Ref()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(ctx, cancelled.ID, ""); err != nil {
			t.Fatal(err)
		}
		res, err := s.WriteMany(ctx, lease.Fail(failed.Ref(), "again"), lease.Fail(cancelled.Ref(), "late"))
		if err != nil || len(res) != 2 {
			t.Fatalf("late writes: %v, %v", res, err)
		}
		if res[0].Verdict != lease.VerdictLost || errors.Is(res[0].Err, leasework.ErrCancelled) || !errors.Is(res[0].Err, leasework.ErrLeaseLost) {
			t.Errorf("late write on a discarded FAILED event: %+v; want plain ErrLeaseLost, not cancelled", res[0])
		}
		if res[1].Verdict != lease.VerdictCancelled || !errors.Is(res[1].Err, leasework.ErrCancelled) {
			t.Errorf("late write on a cancelled event: %+v; want Cancelled", res[1])
		}
		for id, want := range map[int64]bool{failed.ID: false, cancelled.ID: true} {
			r, err := s.Get(ctx, id)
			if err != nil || r.Status != leasework.StatusDiscarded || (r.CancelledAt != nil) != want {
				t.Errorf("row %s: %+v, %v; want DISCARDED, cancelled %v", r.EventID, r, err, want)
			}
		}
	})
}

// Retention deletes DISCARDED rows as it deletes DONE ones, once they
// finished longer ago than it keeps rows, and frees their event ids: a
// cancelled event's id can be enqueued again then, not before. FAILED rows
// stay.
func TestRetentionDeletesDiscardedRows(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "cancelled"}, lease.Event{Kind: "k", EventID: "failed"})
		if _, err := s.Cancel(ctx, ids[0].ID, ""); err != nil {
			t.Fatal(err)
		}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		if _, err := s.Write(ctx, lease.Fail(claims[0].Ref(), "broken")); err != nil {
			t.Fatal(err)
		}
		if n, err := s.DeleteFinished(ctx, time.Hour, 100); err != nil || n != 0 {
			t.Fatalf("DeleteFinished of rows older than an hour = %d, %v; want none yet", n, err)
		}
		if _, err := pgtest.EnqueueCommitted(ctx, s, lease.Event{Kind: "k", EventID: "cancelled"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Fatalf("enqueue of a kept cancelled event's id: %v; want ErrDuplicateEvent", err)
		}
		if n, err := s.DeleteFinished(ctx, 0, 100); err != nil || n != 1 {
			t.Fatalf("DeleteFinished = %d, %v; want the DISCARDED row", n, err)
		}
		if _, err := s.Get(ctx, ids[0].ID); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("the DISCARDED row after retention: %v; want deleted", err)
		}
		if r, err := s.Get(ctx, ids[1].ID); err != nil || r.Status != leasework.StatusFailed {
			t.Fatalf("the FAILED row after retention: %+v, %v; want kept", r, err)
		}
		if _, err := pgtest.EnqueueCommitted(ctx, s, lease.Event{Kind: "k", EventID: "cancelled"}); err != nil {
			t.Fatalf("enqueue of a deleted cancelled event's id: %v; want a new event", err)
		}
	})
}

// Requeue by reference carries the generation the operator saw FAILED, as
// Discard does: a row requeued and failed again since is left alone.
func TestRequeueByRefChecksTheGeneration(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "a"}, lease.Event{Kind: "k", EventID: "b"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
		if err != nil || len(claims) != 2 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		for _, c := range claims {
			if _, err := s.Write(ctx, lease.Fail(c.Ref(), "broken")); err != nil {
				t.Fatal(err)
			}
		}
		seen := []leasework.Ref{claims[0].Ref(), claims[1].Ref()}
		// a is requeued and fails again: the operator's view of it is stale.
		if _, err := s.Requeue(ctx, lease.RequeueRequest{IDs: []int64{seen[0].ID}}); err != nil {
			t.Fatal(err)
		}
		again, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(again) != 1 || again[0].ID != seen[0].ID {
			t.Fatalf("claim again = %v, %v", again, err)
		}
		if _, err := s.Write(ctx, lease.Fail(again[0].Ref(), "broken again")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Requeue(ctx, lease.RequeueRequest{Refs: seen})
		if err != nil || len(got) != 1 || got[0] != seen[1].ID {
			t.Fatalf("Requeue of the refs seen = %v, %v; want only row %d (row %d failed again since)", got, err, seen[1].ID, seen[0].ID)
		}
		if r, err := s.Get(ctx, seen[0].ID); err != nil || r.Status != leasework.StatusFailed || r.Generation != again[0].Generation {
			t.Fatalf("row requeued and failed again since: %+v, %v; want left FAILED at generation %d", r, err, again[0].Generation)
		}
		if _, err := s.Requeue(ctx, lease.RequeueRequest{Refs: seen, IDs: []int64{1}}); err == nil {
			t.Fatal("Requeue with both Refs and IDs: no error")
		}
	})
}

// A requeue by reference reads its rows through the primary key alone,
// with custom and with generic plans, beside 20,000 FAILED rows.
func TestRequeueByRefPlanReadsItsRowsOnly(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFailed(ctx, s, 20_000); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.RequeueRefs(s), `'{7}', '{"7":[1]}', 'chan', 0`)
		if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Bitmap") ||
			!strings.Contains(plan, "Index Scan using "+s.Table()+"_pkey on "+s.Table()) {
			t.Errorf("%s: requeue by reference does not read its row through the primary key alone:\n%s", mode, plan)
		}
		if !regexp.MustCompile(`Update on events o .*rows=1 loops=1`).MatchString(plan) {
			t.Errorf("%s: requeue by reference did not requeue its row:\n%s", mode, plan)
		}
		for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				t.Errorf("%s: requeue by reference removes %d rows by filter:\n%s", mode, n, plan)
			}
		}
	}
}
