package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestConcurrentFirstMigrationsOfOneSchema: 80 first migrations at once,
// ten for each of eight tables in one schema that does not exist yet, all
// succeed (they used to collide creating the schema: a unique violation on
// pg_namespace_nspname_index), each migration is applied once per table,
// and every table works.
func TestConcurrentFirstMigrationsOfOneSchema(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const tables, perTable = 4, 6
		ctx := context.Background()
		db := pgtest.Open(t, drv)
		schema := pgtest.SchemaName()
		stores := make([]*lease.Store, tables)
		for i := range stores {
			s, err := lease.New(db, drv, lease.Options{Schema: schema, Table: fmt.Sprintf("events_%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			stores[i] = s
		}
		t.Cleanup(func() {
			if err := stores[0].DropSchema(context.Background()); err != nil {
				t.Errorf("drop schema: %v", err)
			}
		})

		start := make(chan struct{})
		var wg sync.WaitGroup
		applied := make([][][]int, tables)
		errs := make([][]error, tables)
		for i, s := range stores {
			applied[i], errs[i] = make([][]int, perTable), make([]error, perTable)
			for j := range perTable {
				wg.Go(func() {
					<-start
					applied[i][j], errs[i][j] = s.Migrate(ctx)
				})
			}
		}
		close(start)
		wg.Wait()

		failed := 0
		for i, s := range stores {
			steps := 0
			for j := range perTable {
				if errs[i][j] != nil {
					failed++
					t.Errorf("migrate %s (%d of %d): %v", s.QualifiedTable(), j+1, perTable, errs[i][j])
				}
				steps += len(applied[i][j])
			}
			if want := len(lease.Migrations()); steps != want {
				t.Errorf("%s: %d migration steps applied in all, want %d (each once)", s.QualifiedTable(), steps, want)
			}
		}
		if failed > 0 {
			t.Fatalf("%d of %d concurrent migrations failed", failed, tables*perTable)
		}
		for _, s := range stores {
			pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "one"})
			got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
			if err != nil || len(got) != 1 || got[0].EventID != "one" {
				t.Fatalf("claim on %s = %+v, %v; want the one event", s.QualifiedTable(), got, err)
			}
			if _, err := s.Write(ctx, lease.Complete(got[0].Ref())); err != nil {
				t.Fatalf("complete on %s: %v", s.QualifiedTable(), err)
			}
		}
	})
}

// The SQL a tool runs is the SQL Migrate runs: applied step by step, each
// in a transaction of its own (a step that cannot run in one, statement by
// statement), it builds a table that works, records every step, and
// Migrate then has nothing left to apply.
func TestMigrationSQLAppliedByAnotherTool(t *testing.T) {
	db := pgtest.Open(t, drv)
	ctx := context.Background()
	opts := lease.Options{Schema: pgtest.SchemaName(), Table: "jobs"}
	for _, m := range lease.Migrations() {
		q, err := m.SQL(opts)
		if err != nil {
			t.Fatal(err)
		}
		if m.NoTransaction {
			for i, st := range lease.Statements(q) {
				if _, err := db.ExecContext(ctx, st); err != nil {
					t.Fatalf("migration %d (%s), statement %d: %v", m.Version, m.Name, i+1, err)
				}
			}
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("migration %d (%s): %v", m.Version, m.Name, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := lease.New(db, drv, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.DropSchema(ctx)
	if applied, err := s.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate after the tool = %v, %v; want nothing left to apply", applied, err)
	}
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "e", Queue: "q"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "q"})
	if err != nil || len(claims) != 1 || claims[0].EventID != "e" {
		t.Fatalf("claim on the tool's table = %v, %v", claims, err)
	}
	if _, err := lease.Migrations()[0].SQL(lease.Options{Schema: "Bad"}); err == nil {
		t.Error("SQL for a schema with upper case was rendered")
	}
	var stopped []int
	for _, m := range lease.Migrations() {
		if !m.WhileWorkersRun {
			stopped = append(stopped, m.Version)
		}
	}
	if len(stopped) != 1 || stopped[0] != 5 {
		t.Errorf("migrations to run with workers stopped: %v; want [5] (event ids)", stopped)
	}
}

// Migration 8 gives the event id triggers their owner's rights on a table
// migrated by an earlier release of migration 5, which created them
// without.
func TestEventIDTriggersRunWithTheOwnersRights(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	definer := func() []bool {
		rows, err := s.DB().QueryContext(ctx, `SELECT p.prosecdef FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = $1 AND p.proname IN ($2, $3) ORDER BY p.proname`, s.Schema(), s.Table()+"_forget_all_event_ids", s.Table()+"_forget_event_ids")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []bool
		for rows.Next() {
			var b bool
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	if got := definer(); len(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("security definer after Migrate: %v; want both", got)
	}
	// As an earlier release of migration 5 left them.
	sch := lease.QuoteIdent(s.Schema())
	for _, q := range []string{
		"ALTER FUNCTION " + sch + "." + lease.QuoteIdent(s.Table()+"_forget_event_ids") + "() SECURITY INVOKER RESET search_path",
		"ALTER FUNCTION " + sch + "." + lease.QuoteIdent(s.Table()+"_forget_all_event_ids") + "() SECURITY INVOKER RESET search_path",
		"DELETE FROM " + sch + "." + lease.QuoteIdent(s.Table()+"_migrations") + " WHERE version = 8",
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got := definer(); len(got) != 2 || got[0] || got[1] {
		t.Fatalf("security definer after the fixture: %v; want neither", got)
	}
	if applied, err := s.Migrate(ctx); err != nil || len(applied) != 1 || applied[0] != 8 {
		t.Fatalf("Migrate = %v, %v; want migration 8 applied", applied, err)
	}
	if got := definer(); len(got) != 2 || !got[0] || !got[1] {
		t.Errorf("security definer after migration 8: %v; want both", got)
	}
}
