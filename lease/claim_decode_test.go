package lease_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestClaimSettlesRowsItCannotDecode: a claim never fails for one row
// (invariant 14). Rows written by a producer's own SQL before migration 10
// that a claim cannot decode — metadata migration 7's check admitted
// (an array value, an empty array) and a due time of -infinity, which no
// check refused — are claimed with good rows, through Claim and through
// ClaimTx. The good rows are returned; each bad one ends FAILED at the
// generation its claim gave it, with a reason that names the column, is
// not claimed again, and its row still reads, saying which column it
// cannot decode.
func TestClaimSettlesRowsItCannotDecode(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: pgtest.SchemaName()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DropSchema(context.Background()) })
		if err := lease.MigrateTo(ctx, s, 9); err != nil {
			t.Fatal(err)
		}
		// event id -> the column its claim cannot decode. Queue "a" is
		// claimed with Claim, queue "b" with ClaimTx.
		bad := map[string]string{
			"a array value": "metadata",
			"a empty array": "metadata",
			"a -infinity":   "next_attempt_at",
			"b array value": "metadata",
			"b -infinity":   "next_attempt_at",
		}
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind, queue, metadata, next_attempt_at) VALUES
			('a array value', 'k', 'a', '{"tenant": ["acme"]}', now()),
			('a empty array', 'k', 'a', '{"a": []}', now()),
			('a -infinity', 'k', 'a', NULL, '-infinity'),
			('b array value', 'k', 'b', '{"tenant": ["acme"], "b": "x"}', now()),
			('b -infinity', 'k', 'b', '{"ok": "yes"}', '-infinity')`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "a good 1", Queue: "a", Metadata: map[string]string{"tenant": "acme"}},
			lease.Event{Kind: "k", EventID: "a good 2", Queue: "a"},
			lease.Event{Kind: "k", EventID: "b good", Queue: "b", Metadata: map[string]string{"tenant": "acme"}},
		)

		claimed := func(claims []leasework.Claim) []string {
			var ids []string
			for _, c := range claims {
				ids = append(ids, c.EventID)
			}
			slices.Sort(ids)
			return ids
		}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "a"})
		if got, want := claimed(claims), []string{"a good 1", "a good 2"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("claim of queue a = %q, %v; want %q", got, err, want)
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		claims, err = s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: "b"})
		if got, want := claimed(claims), []string{"b good"}; err != nil || !slices.Equal(got, want) {
			tx.Rollback()
			t.Fatalf("ClaimTx of queue b = %q, %v; want %q", got, err, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		for eventID, column := range bad {
			var status, lastError string
			var id int64
			var generation, attempt int
			if err := s.DB().QueryRowContext(ctx, `SELECT id, status, generation, attempt, COALESCE(last_error, '') FROM `+
				s.QualifiedTable()+` WHERE event_id = $1`, eventID).Scan(&id, &status, &generation, &attempt, &lastError); err != nil {
				t.Fatal(err)
			}
			t.Logf("row %q: %s, last error %q", eventID, status, lastError)
			if status != "FAILED" || generation != 1 || attempt != 1 || !strings.Contains(lastError, `column "`+column+`"`) {
				t.Errorf("row %q: %s at generation %d, attempt %d, last error %q; want FAILED at generation 1, attempt 1, naming column %q",
					eventID, status, generation, attempt, lastError, column)
			}
			r, err := s.Get(ctx, id)
			if err != nil || r.Status != leasework.StatusFailed || r.DecodeError == nil || !strings.Contains(r.DecodeError.Error(), `column "`+column+`"`) {
				t.Errorf("read of row %q: %+v, %v; want it FAILED, with a decode error naming column %q", eventID, r, err, column)
			}
		}
		rows, err := s.List(ctx, lease.ListRequest{Status: leasework.StatusFailed})
		if err != nil || len(rows) != len(bad) {
			t.Errorf("list of FAILED rows = %d rows, %v; want the %d rows the claims could not decode", len(rows), err, len(bad))
		}
		for _, q := range []string{"a", "b"} {
			if again, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Queue: q}); err != nil || len(again) != 0 {
				t.Errorf("second claim of queue %s = %d claims, %v; want none (the bad rows are FAILED)", q, len(again), err)
			}
		}
	})
}
