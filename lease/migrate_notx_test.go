package lease_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// notxSteps are three steps after the embedded ones: a column, a unique
// index built concurrently (which PostgreSQL refuses inside a transaction
// block), and another column.
func notxSteps(t *testing.T) []lease.Migration {
	t.Helper()
	var ms []lease.Migration
	for _, m := range []struct {
		v          int
		name, text string
	}{
		{1001, "extra", "-- leasework: workers running\nALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS extra bigint;\n"},
		{1002, "extra_index", `-- leasework: workers running
-- leasework: no transaction
-- A failed concurrent build leaves an invalid index: drop it first.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.{{name "extra_idx"}};
CREATE UNIQUE INDEX CONCURRENTLY {{name "extra_idx"}}
    ON {{table}} (extra);
`},
		{1003, "extra2", "-- leasework: workers running\nALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS extra2 bigint;\n"},
	} {
		mg, err := lease.NewMigration(m.v, m.name, m.text)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, mg)
	}
	if ms[0].NoTransaction || !ms[1].NoTransaction || ms[2].NoTransaction {
		t.Fatalf("NoTransaction read as %v %v %v; want only the index's", ms[0].NoTransaction, ms[1].NoTransaction, ms[2].NoTransaction)
	}
	return append(lease.Migrations(), ms...)
}

// A step that cannot run in a transaction is applied outside one, between
// the transactions of the steps around it. When it fails part-way, the
// steps before it stay applied, the ones after it wait, and the next
// Migrate runs it again from the start and goes on.
func TestMigrationOutsideATransaction(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	ms := notxSteps(t)
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"}, lease.Event{Kind: "k"})

	// Two rows with the same value: the unique index cannot be built.
	if _, err := lease.MigrateWith(ctx, s, ms[:len(ms)-2]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+" SET extra = 1"); err != nil {
		t.Fatal(err)
	}
	applied, err := lease.MigrateWith(ctx, s, ms)
	if err == nil || !strings.Contains(err.Error(), "migration 1002 (extra_index), statement 2") || len(applied) != 0 {
		t.Fatalf("Migrate with duplicates: applied %v, %v; want nothing applied and statement 2 of 1002 failed", applied, err)
	}
	if v := indexValid(t, s); v != "invalid" {
		t.Fatalf("index after the failed build: %s; want invalid", v)
	}
	if got := recorded(t, s); slices.Contains(got, 1002) || slices.Contains(got, 1003) {
		t.Fatalf("recorded %v after the failure; want neither 1002 nor 1003", got)
	}

	if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+" SET extra = id"); err != nil {
		t.Fatal(err)
	}
	applied, err = lease.MigrateWith(ctx, s, ms)
	if err != nil || !slices.Equal(applied, []int{1002, 1003}) {
		t.Fatalf("Migrate again: applied %v, %v; want [1002 1003]", applied, err)
	}
	if v := indexValid(t, s); v != "valid" {
		t.Fatalf("index after the second build: %s; want valid", v)
	}
	if applied, err := lease.MigrateWith(ctx, s, ms); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate a third time: applied %v, %v; want nothing", applied, err)
	}
}

// Processes migrating at once apply each step once in all, the one outside
// a transaction included.
func TestConcurrentMigrationsOutsideATransaction(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ms := notxSteps(t)
	const n = 6
	var wg sync.WaitGroup
	applied := make([][]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { applied[i], errs[i] = lease.MigrateWith(context.Background(), s, ms) })
	}
	wg.Wait()
	var all []int
	for i := range n {
		if errs[i] != nil {
			t.Errorf("migration %d: %v", i, errs[i])
		}
		all = append(all, applied[i]...)
	}
	slices.Sort(all)
	if !slices.Equal(all, []int{1001, 1002, 1003}) {
		t.Errorf("applied in all: %v; want each of 1001, 1002, 1003 once", all)
	}
	if v := indexValid(t, s); v != "valid" {
		t.Errorf("index: %s; want valid", v)
	}
}

// The directives are checked, and the statements of a step run outside a
// transaction are split at semicolons ending a line, comments left out.
func TestMigrationDirectives(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"ALTER TABLE {{table}} ADD COLUMN x int;", "does not say whether workers may run"},
		{"-- leasework: workers sometimes\nSELECT 1;", "does not say whether workers may run"},
		{"-- leasework: workers running\n-- leasework: fast\nSELECT 1;", `unknown directive "fast"`},
		{"-- leasework: workers running\n-- leasework: no transaction\n-- only a comment\n", "has no statement"},
	} {
		if _, err := lease.NewMigration(1, "x", c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewMigration(%q): %v; want an error saying %q", c.text, err, c.want)
		}
	}
	got := lease.Statements("-- head\nDROP INDEX CONCURRENTLY IF EXISTS a;\n\nCREATE INDEX CONCURRENTLY b\n    ON t (x);\n-- tail\nSELECT 1")
	want := []string{"DROP INDEX CONCURRENTLY IF EXISTS a;", "CREATE INDEX CONCURRENTLY b\n    ON t (x);", "SELECT 1"}
	if !slices.Equal(got, want) {
		t.Errorf("Statements = %q; want %q", got, want)
	}
	// A function's body and a DO block are one statement each, their
	// semicolons, blank lines and comments included.
	fn := "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$\nBEGIN\n    PERFORM 1;\n\n    -- why\n    PERFORM '$x$';\nEND\n$$;"
	do := "DO $body$\nBEGIN\n    RAISE NOTICE '$$;';\nEND\n$body$;"
	got = lease.Statements("-- head\n" + fn + "\n-- between\n" + do + "\nSELECT $1::int;\n")
	want = []string{fn, do, "SELECT $1::int;"}
	if !slices.Equal(got, want) {
		t.Errorf("Statements with dollar quotes = %q; want %q", got, want)
	}
}

func indexValid(t *testing.T, s *lease.Store) string {
	t.Helper()
	var valid bool
	err := s.DB().QueryRowContext(context.Background(), `SELECT i.indisvalid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, s.Schema(), s.Table()+"_extra_idx").Scan(&valid)
	if err != nil {
		return "missing: " + err.Error()
	}
	if valid {
		return "valid"
	}
	return "invalid"
}

func recorded(t *testing.T, s *lease.Store) []int {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), `SELECT version FROM `+lease.QuoteIdent(s.Schema())+`.`+lease.QuoteIdent(s.Table()+"_migrations")+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}
