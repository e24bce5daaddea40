package lease_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestRetentionPlanSkipsFailedRows: retention deletes DONE (and DISCARDED)
// rows and keeps FAILED ones forever, so its indexes must hold only those. With 50,000
// FAILED rows and a few DONE ones, the DeleteFinished statement reads an
// index, never the whole table, with custom and with generic plans, and
// deletes only the DONE rows.
func TestRetentionPlanSkipsFailedRows(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFailed(ctx, s, 50_000); err != nil {
		t.Fatal(err)
	}
	if err := leasetest.InsertFinished(ctx, s, 20); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.DeleteFinished(s), "0, 1000, true")
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index Scan using "+s.Table()+"_done_idx") ||
			!strings.Contains(plan, "Index Scan using "+s.Table()+"_discarded_idx") {
			t.Errorf("%s: retention does not read the indexes of DONE and DISCARDED rows:\n%s", mode, plan)
		}
		if !strings.Contains(plan, "Index Scan using "+s.Table()+"_pkey on "+s.Table()) {
			t.Errorf("%s: retention does not delete its rows through the primary key:\n%s", mode, plan)
		}
	}
	n, err := s.DeleteFinished(ctx, 0, 1000)
	if err != nil || n != 20 {
		t.Fatalf("DeleteFinished = %d, %v; want the 20 DONE rows", n, err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Rows[leasework.StatusFailed] != 50_000 || st.Rows[leasework.StatusDone] != 0 {
		t.Fatalf("stats after retention = %+v, %v; want 50,000 FAILED rows kept and no DONE row", st, err)
	}
}

// TestRetentionIndexMigrationIsRerunnable: the migration that replaces the
// retention index can run again on a table that has it (as after a manual
// CREATE INDEX CONCURRENTLY), and leaves one index over DONE rows only.
func TestRetentionIndexMigrationIsRerunnable(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+"_migrations")+` WHERE version = 3`); err != nil {
		t.Fatal(err)
	}
	applied, err := s.Migrate(ctx)
	if err != nil || len(applied) != 1 || applied[0] != 3 {
		t.Fatalf("Migrate again = %v, %v; want migration 3 applied again", applied, err)
	}
	var defs []string
	// The FAILED rows' index of migration 9 is not a retention index, and
	// the DISCARDED rows' of migration 11 is not migration 3's.
	rows, err := s.DB().QueryContext(ctx, `SELECT indexdef FROM pg_indexes
		WHERE schemaname = $1 AND tablename = $2 AND indexdef LIKE '%(finished_at)%' AND indexname <> ALL ($3)`,
		s.Schema(), s.Table(), "{"+s.Table()+"_failed_idx,"+s.Table()+"_discarded_idx}")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		defs = append(defs, d)
	}
	if len(defs) != 1 || !strings.Contains(defs[0], "WHERE (status = 'DONE'::text)") {
		t.Fatalf("retention indexes = %q; want one, over DONE rows only", defs)
	}
}
