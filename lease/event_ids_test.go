package lease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestEventIDsMoveToTheirOwnTable upgrades a table at version 4, whose
// event ids were unique on the events table itself, holding rows: after
// migration 5 the old rows' ids are still refused as duplicates (or
// skipped), found by GetByEventID, and the events table has no index on
// them any more, while new events enqueue and claim as before. Deleting a
// row frees its id.
func TestEventIDsMoveToTheirOwnTable(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		db := pgtest.Open(t, drv)
		s, err := lease.New(db, drv, lease.Options{Schema: pgtest.SchemaName()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DropSchema(context.Background()) })
		if err := lease.MigrateTo(ctx, s, 4); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO "+s.QualifiedTable()+" (event_id, kind) VALUES ('old-1', 'k'), ('old-2', 'k')"); err != nil {
			t.Fatal(err)
		}
		applied, err := s.Migrate(ctx)
		if err != nil || len(applied) == 0 || applied[0] != 5 {
			t.Fatalf("Migrate = %v, %v; want 5 and the later ones applied", applied, err)
		}

		enqueue := func(opts lease.EnqueueOptions, events ...lease.Event) ([]lease.Enqueued, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			got, err := s.EnqueueWith(ctx, tx, opts, events...)
			if err != nil {
				return nil, err
			}
			return got, tx.Commit()
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "old-1"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("enqueue of an id enqueued before the migration: %v; want ErrDuplicateEvent", err)
		}
		got, err := enqueue(lease.EnqueueOptions{SkipDuplicates: true},
			lease.Event{Kind: "k", EventID: "old-2"}, lease.Event{Kind: "k", EventID: "new-1"})
		if err != nil || !got[0].Duplicate || got[1].Duplicate || got[1].ID == 0 {
			t.Fatalf("enqueue skipping duplicates = %+v, %v; want old-2 a duplicate and new-1 inserted", got, err)
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "new-1"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("enqueue of an id enqueued after the migration: %v; want ErrDuplicateEvent", err)
		}
		for _, id := range []string{"old-2", "new-1"} {
			if r, err := s.GetByEventID(ctx, id); err != nil || r.EventID != id {
				t.Errorf("GetByEventID(%q) = %+v, %v", id, r, err)
			}
		}
		var indexes int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_index i JOIN pg_attribute a
			ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND a.attname = 'event_id'`, s.QualifiedTable()).Scan(&indexes); err != nil {
			t.Fatal(err)
		}
		if indexes != 0 {
			t.Errorf("%d indexes of the events table cover event_id; want none", indexes)
		}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: 30e9})
		if err != nil || len(claims) != 3 {
			t.Fatalf("claim = %d rows, %v; want the 3 events", len(claims), err)
		}

		// Deleting a row, by any statement, frees its event id, as it did
		// when the id was the row's; so does emptying the table.
		if _, err := db.ExecContext(ctx, "DELETE FROM "+s.QualifiedTable()+" WHERE event_id = 'old-1'"); err != nil {
			t.Fatal(err)
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "old-1"}); err != nil {
			t.Errorf("enqueue of the id of a deleted row: %v; want it enqueued", err)
		}
		if _, err := db.ExecContext(ctx, "TRUNCATE "+s.QualifiedTable()); err != nil {
			t.Fatal(err)
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "old-2"}, lease.Event{Kind: "k", EventID: "new-1"}); err != nil {
			t.Errorf("enqueue of the ids of a truncated table: %v; want them enqueued", err)
		}
	})
}
