package pgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A batch copied in a pgx.Tx (pgx's binary CopyFrom) and the same batch
// inserted give the same rows: every column, generated event ids, the
// order of row ids (key order in the database's collation, then the order
// given), statuses, and the due time to the microsecond as the server
// rounds the INSERT's text (or, without RunAt, the time of the statement
// that wrote the row). With and without SkipDuplicates.
func TestEnqueueInPgxTxCopiesWhatItInserts(t *testing.T) {
	base := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	nanos := []int{0, 500, 1500, 2500, 2501, 999_999_500, 123_456_789, 999_999_999, 1}
	for _, c := range []struct {
		name  string
		runAt func(i int) time.Time
		skip  bool
	}{
		{"due now", nil, false},
		{"due now, skipping duplicates", nil, true},
		{"due later", func(i int) time.Time { return base.Add(time.Duration(nanos[i])) }, false},
		{"due later, skipping duplicates", func(i int) time.Time { return base.Add(time.Duration(nanos[i])).In(time.FixedZone("x", -7200)) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			insert := pgtest.Store(t, pgxdriver.New(), lease.Options{EnqueueCopyMin: -1})
			copying, err := lease.New(insert.DB(), pgxdriver.New(), lease.Options{Schema: insert.Schema(), EnqueueCopyMin: 1})
			if err != nil {
				t.Fatal(err)
			}
			inserts := pgtest.WatchInserts(t, insert)
			pool := newPool(t)
			opts := lease.EnqueueOptions{SkipDuplicates: c.skip}
			var out [2][]lease.Enqueued
			for i, s := range []*lease.Store{insert, copying} {
				tx := begin(t, pool)
				out[i], err = s.EnqueueTx(ctx, pgxdriver.WrapTx(tx), opts, pgtest.CopyBatch([]string{"ins:", "cp:"}[i], c.runAt)...)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if copies, statements := inserts(); copies != 1 || statements != 1 {
				t.Errorf("rows went in by %d COPY and %d INSERT statements; want one of each", copies, statements)
			}
			pgtest.CompareRows(t, insert, out[0], out[1])
		})
	}
}

// Rows copied into the table with pgx's CopyFrom (WrapTx as a
// leasework.CopyTx) meet the schema's insert triggers as inserted rows do:
// metadata a claim could not read is refused with check_violation (23514).
func TestPgxCopyRunsTheTableChecks(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	pool := newPool(t)
	for _, bad := range []string{`{"n": 1}`, `{"tenant": ["acme"]}`, `[]`} {
		tx := begin(t, pool)
		ct, ok := pgxdriver.WrapTx(tx).(leasework.CopyTx)
		if !ok {
			t.Fatalf("WrapTx is a %T; want a leasework.CopyTx", pgxdriver.WrapTx(tx))
		}
		n, err := ct.CopyFrom(ctx, []string{s.Schema(), s.Table()}, []string{"event_id", "kind", "metadata"},
			[][]any{{"good", "k", `{"a": "x"}`}, {"bad", "k", bad}})
		if got := ct.SQLState(err); got != "23514" {
			t.Errorf("copy of metadata %s: %d rows, %v (SQLSTATE %q); want check_violation, 23514", bad, n, err, got)
		}
		_ = tx.Rollback(ctx)
	}
}
