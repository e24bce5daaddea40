package lease_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Migration 11 on a table of an earlier release: events cancelled before
// it (DISCARDED with the last error Cancel wrote) are recorded cancelled,
// at the time they finished; a FAILED event discarded with another error
// is not. The step runs outside a transaction, its function body kept
// whole by the statement splitter, and runs again after a failure
// part-way (here: as if it had never been recorded) to the same end.
func TestCancelMigrationRecordsEarlierCancels(t *testing.T) {
	ctx := context.Background()
	db := pgtest.Open(t, drv)
	s, err := lease.New(db, drv, lease.Options{Schema: pgtest.SchemaName()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DropSchema(context.Background()) })
	if err := lease.MigrateTo(ctx, s, 10); err != nil {
		t.Fatal(err)
	}
	// The rows are inserted as that version's enqueue wrote them: today's
	// writes columns of later migrations.
	var ids []int64
	for _, eventID := range []string{"plain", "reason", "discarded", "open"} {
		var id int64
		if err := db.QueryRowContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind) VALUES ($1, 'k') RETURNING id`,
			eventID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, text := range []string{"cancelled", "cancelled: customer withdrew", "cancelledness is not a word"} {
		if _, err := db.ExecContext(ctx, `UPDATE `+s.QualifiedTable()+`
			SET status = 'DISCARDED', last_error = $2, finished_at = statement_timestamp() - interval '1 day'
			WHERE id = $1`, ids[i], text); err != nil {
			t.Fatal(err)
		}
	}
	var m11 lease.Migration
	for _, m := range lease.Migrations() {
		if m.Version == 11 {
			m11 = m
		}
	}
	if !m11.NoTransaction || !m11.WhileWorkersRun {
		t.Fatalf("migration 11: %+v; want it run outside a transaction, with workers running", m11)
	}
	sql, err := m11.SQL(lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fn []string
	for _, st := range lease.Statements(sql) {
		if strings.HasPrefix(st, "CREATE OR REPLACE FUNCTION") {
			fn = append(fn, st)
		}
	}
	if len(fn) != 1 || !strings.HasSuffix(fn[0], "END\n$$;") || !strings.Contains(fn[0], "RAISE EXCEPTION") {
		t.Fatalf("the step's function, as the splitter cuts it: %q; want one statement, its body whole", fn)
	}

	for round := range 2 {
		applied, err := s.Migrate(ctx)
		if err != nil || !slices.Contains(applied, 11) {
			t.Fatalf("round %d: Migrate = %v, %v; want 11 applied", round, applied, err)
		}
		for i, want := range []bool{true, true, false, false} {
			r, err := s.Get(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			if got := r.CancelledAt != nil; got != want {
				t.Errorf("round %d: %s (%s, %q) cancelled = %v; want %v", round, r.EventID, r.Status, r.LastError, got, want)
			}
			if want && !r.CancelledAt.Equal(*r.FinishedAt) {
				t.Errorf("round %d: %s cancelled at %v; want when it finished, %v", round, r.EventID, r.CancelledAt, r.FinishedAt)
			}
		}
		var valid int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname IN ('events_stopping_idx', 'events_discarded_idx') AND i.indisvalid`,
			s.Schema()).Scan(&valid); err != nil || valid != 2 {
			t.Fatalf("round %d: valid indexes of migration 11: %d, %v; want 2", round, valid, err)
		}
		// As if the step had failed part-way: not recorded, run again.
		if _, err := db.ExecContext(ctx, `DELETE FROM `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+"_migrations")+
			` WHERE version = 11`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, ids[3]); st != leasework.StatusReady {
		t.Fatalf("the open event after the migration: %s; want READY", st)
	}
}
