package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// schemaStores returns a fresh schema (dropped at the end of the test) and
// a function that makes a store of one of its tables.
func schemaStores(t *testing.T, drv leasework.Driver) (db *sql.DB, schema string, store func(table string) *lease.Store) {
	t.Helper()
	db = pgtest.Open(t, drv)
	schema = pgtest.SchemaName()
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+lease.QuoteIdent(schema)+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	if _, err := db.ExecContext(context.Background(), "CREATE SCHEMA "+lease.QuoteIdent(schema)); err != nil {
		t.Fatal(err)
	}
	return db, schema, func(table string) *lease.Store {
		s, err := lease.New(db, drv, lease.Options{Schema: schema, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// collides fails the test unless err is a NameCollisionError of table
// that names every one of names (and no other), saying what holds each
// (found, a text each Found must contain, in order) and the fix.
func collides(t *testing.T, err error, schema, table string, names []string, found []string) {
	t.Helper()
	var ce *lease.NameCollisionError
	if !errors.As(err, &ce) {
		t.Fatalf("Migrate of %s: %v; want a NameCollisionError naming %q", table, err, names)
	}
	if ce.Schema != schema || ce.Table != table {
		t.Errorf("the collision is of %s.%s; want %s.%s", ce.Schema, ce.Table, schema, table)
	}
	var got []string
	for i, c := range ce.Collisions {
		got = append(got, c.Name)
		if i < len(found) && !strings.Contains(c.Found, found[i]) {
			t.Errorf("%q is %q; want it to say %q", c.Name, c.Found, found[i])
		}
		if c.Use == "" {
			t.Errorf("%q: the collision does not say what the table wants the name for", c.Name)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("the collisions name %q; want %q", got, names)
	}
	msg := err.Error()
	for _, want := range append(slices.Clone(names), "another table name", "another schema") {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if !regexp.MustCompile(`Migration \d+ and later were not applied\.|No migration was applied\.`).MatchString(msg) {
		t.Errorf("the error does not say what was not applied:\n%s", msg)
	}
}

// exists reports whether schema has a relation named name.
func exists(t *testing.T, db *sql.DB, schema, name string) bool {
	t.Helper()
	var ok bool
	err := db.QueryRowContext(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2)`,
		schema, name).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// indexTable returns the table the index schema.name is on; "" if there
// is no such index.
func indexTable(t *testing.T, db *sql.DB, schema, name string) string {
	t.Helper()
	var table string
	err := db.QueryRowContext(context.Background(), `
		SELECT tc.relname FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = ic.relnamespace
		JOIN pg_class tc ON tc.oid = i.indrelid
		WHERE n.nspname = $1 AND ic.relname = $2`, schema, name).Scan(&table)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// Each kind of object a table's migrations name after the table, made
// beforehand by someone else under that name: Migrate refuses, naming the
// object, what has the name, and the fix, and creates nothing (no table,
// no migrations table); the other object is left as it was. Before, every
// one of them was taken silently as the table's own: CREATE ... IF NOT
// EXISTS skipped it (a view, a table, an index on another table, another
// table's sequence), CREATE OR REPLACE FUNCTION rewrote another table's
// trigger function, and a foreign "migrations" table with versions made
// Migrate apply nothing at all.
func TestMigrateRefusesNamesTakenByOthers(t *testing.T) {
	cases := []struct {
		name  string
		setup string // {{s}} is the quoted schema
		taken []string
		found []string
		check string // a query that returns true while the other object is as it was
	}{
		{
			name:  "paused-queues table",
			setup: `CREATE TABLE {{s}}.jobs_queues (queue text, note text); INSERT INTO {{s}}.jobs_queues VALUES ('default', 'mine')`,
			taken: []string{"jobs_queues"}, found: []string{"a table without the columns"},
			check: `SELECT note = 'mine' FROM {{s}}.jobs_queues`,
		},
		{
			name:  "event ids table",
			setup: `CREATE TABLE {{s}}.jobs_event_ids (event_id text PRIMARY KEY, owner text)`,
			taken: []string{"jobs_event_ids"}, found: []string{"a table without the columns"},
			check: `SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = '{{s}}.jobs_event_ids'::regclass AND attnum > 0`,
		},
		{
			name: "migrations table",
			setup: `CREATE TABLE {{s}}.jobs_migrations (version integer PRIMARY KEY, name text NOT NULL);
				INSERT INTO {{s}}.jobs_migrations SELECT v, 'theirs' FROM generate_series(1, 100) AS v`,
			taken: []string{"jobs_migrations"}, found: []string{"a table without the columns"},
			check: `SELECT count(*) = 100 FROM {{s}}.jobs_migrations`,
		},
		{
			name:  "sequence of another table",
			setup: `CREATE TABLE {{s}}.counters (n bigint); CREATE SEQUENCE {{s}}.jobs_key_seq OWNED BY {{s}}.counters.n`,
			taken: []string{"jobs_key_seq"}, found: []string{"a sequence of table"},
			check: `SELECT count(*) = 1 FROM pg_depend WHERE objid = '{{s}}.jobs_key_seq'::regclass AND refobjid = '{{s}}.counters'::regclass`,
		},
		{
			name:  "table where a sequence goes",
			setup: `CREATE TABLE {{s}}.jobs_key_seq (x int)`,
			taken: []string{"jobs_key_seq"}, found: []string{"a table"},
			check: `SELECT relkind = 'r' FROM pg_class WHERE oid = '{{s}}.jobs_key_seq'::regclass`,
		},
		{
			name:  "index on another table",
			setup: `CREATE TABLE {{s}}.other (x int); CREATE INDEX jobs_queue_ready_idx ON {{s}}.other (x)`,
			taken: []string{"jobs_queue_ready_idx"}, found: []string{"an index on table"},
			check: `SELECT indrelid = '{{s}}.other'::regclass FROM pg_index WHERE indexrelid = '{{s}}.jobs_queue_ready_idx'::regclass`,
		},
		{
			name:  "view where an index goes",
			setup: `CREATE VIEW {{s}}.jobs_failed_idx AS SELECT 1 AS one`,
			taken: []string{"jobs_failed_idx"}, found: []string{"a view"},
			check: `SELECT relkind = 'v' FROM pg_class WHERE oid = '{{s}}.jobs_failed_idx'::regclass`,
		},
		{
			name: "trigger function of another table",
			setup: `CREATE TABLE {{s}}.audit (x int);
				CREATE FUNCTION {{s}}.jobs_release_key() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; /* audit */ END $$;
				CREATE TRIGGER audit_release AFTER INSERT ON {{s}}.audit FOR EACH ROW EXECUTE FUNCTION {{s}}.jobs_release_key()`,
			taken: []string{"jobs_release_key"}, found: []string{"a function that a trigger on table"},
			check: `SELECT prosrc LIKE '%audit%' FROM pg_proc WHERE oid = '{{s}}.jobs_release_key()'::regprocedure`,
		},
		{
			name:  "function",
			setup: `CREATE FUNCTION {{s}}.jobs_settle_key(k text) RETURNS void LANGUAGE sql AS $$ SELECT /* mine */ $$`,
			taken: []string{"jobs_settle_key"}, found: []string{"a function this table's migrations did not create"},
			check: `SELECT prosrc LIKE '%mine%' FROM pg_proc WHERE oid = '{{s}}.jobs_settle_key(text)'::regprocedure`,
		},
		{
			name:  "events table",
			setup: `CREATE TABLE {{s}}.jobs (x int)`,
			taken: []string{"jobs"}, found: []string{"a table that no migration of"},
			check: `SELECT count(*) = 1 FROM pg_attribute WHERE attrelid = '{{s}}.jobs'::regclass AND attnum > 0`,
		},
		{
			name: "several",
			setup: `CREATE TABLE {{s}}.jobs_queues (queue text PRIMARY KEY);
				CREATE TABLE {{s}}.other (x int); CREATE INDEX jobs_waiting_idx ON {{s}}.other (x)`,
			taken: []string{"jobs_waiting_idx", "jobs_queues"}, found: []string{"an index on table", "a table without the columns"},
			check: `SELECT count(*) = 2 FROM pg_class WHERE relnamespace = '{{s}}'::regnamespace AND relname IN ('jobs_queues', 'jobs_waiting_idx')`,
		},
	}
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				ctx := context.Background()
				db, schema, store := schemaStores(t, drv)
				sub := func(q string) string { return strings.ReplaceAll(q, "{{s}}", lease.QuoteIdent(schema)) }
				if _, err := db.ExecContext(ctx, sub(c.setup)); err != nil {
					t.Fatal(err)
				}
				applied, err := store("jobs").Migrate(ctx)
				if err == nil {
					t.Fatalf("Migrate of jobs beside the %s took it for its own: applied %v, no error; want a collision naming %q", c.name, applied, c.taken)
				}
				collides(t, err, schema, "jobs", c.taken, c.found)
				if len(applied) != 0 {
					t.Errorf("applied %v; want nothing", applied)
				}
				if c.taken[0] != "jobs" && exists(t, db, schema, "jobs") {
					t.Error("the table jobs was created")
				}
				if c.taken[0] != "jobs_migrations" && exists(t, db, schema, "jobs_migrations") {
					t.Error("the table jobs_migrations was created")
				}
				var same bool
				if err := db.QueryRowContext(ctx, sub(c.check)).Scan(&same); err != nil || !same {
					t.Errorf("the other object changed: %s is %v (%v)", c.check, same, err)
				}
				// The fix the error gives: another table name.
				if _, err := store("jobs2").Migrate(ctx); err != nil {
					t.Errorf("Migrate of jobs2 in the same schema: %v", err)
				}
			})
		}
	})
}

// Two leasework tables whose derived names meet: "jobs" wants "jobs_queues"
// for its paused queues, which is the events table of another. Migrating
// jobs is refused, whichever was there first, and the other table is
// untouched. Before, jobs took the other events table as its paused-queues
// table: an event of queue "default" there paused jobs' default queue.
func TestMigrateRefusesAnotherEventsTableAsItsQueues(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		db, schema, store := schemaStores(t, drv)
		other := store("jobs_queues")
		if _, err := other.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		pgtest.Enqueue(t, other, lease.Event{Kind: "k"})
		applied, err := store("jobs").Migrate(ctx)
		if err == nil {
			t.Fatalf("Migrate of jobs beside the events table jobs_queues: applied %v, no error; want a collision naming jobs_queues", applied)
		}
		collides(t, err, schema, "jobs", []string{"jobs_queues"}, []string{"a table without the columns"})
		if exists(t, db, schema, "jobs") {
			t.Error("the table jobs was created")
		}
		if applied, err := other.Migrate(ctx); err != nil || len(applied) != 0 {
			t.Errorf("Migrate of jobs_queues again: %v, %v; want nothing to apply", applied, err)
		}

		// The other way round: jobs first, then an events table named as
		// jobs' paused-queues table.
		db2, schema2, store2 := schemaStores(t, drv)
		if _, err := store2("jobs").Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = store2("jobs_queues").Migrate(ctx)
		collides(t, err, schema2, "jobs_queues", []string{"jobs_queues"}, []string{"a table that no migration of"})
		if exists(t, db2, schema2, "jobs_queues_migrations") {
			t.Error("the table jobs_queues_migrations was created")
		}
	})
}

// Tables "a" and "a_queue" derive one name for two indexes: "a" + "_" +
// "queue_ready_idx" (its index of READY rows per queue, migration 6) is
// "a_queue" + "_" + "ready_idx" (its index of READY rows before migration
// 6, which drops it); the same for the leases' indexes. With both at
// version 5, upgrading "a" first took a_queue's indexes as its own, then
// dropped its own; upgrading a_queue dropped them: a's claim had no index
// of its READY rows or its leases left and read every finished row. Now
// that upgrade is refused, naming the index and its table; upgrading
// a_queue first frees the name, and then "a" gets an index of its own.
// The other way round, "a" at the last version and a new "a_queue": its
// first migration is refused (it failed with "relation already exists").
func TestMigrateRefusesAnIndexOfATableThatSharesItsPrefix(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		db, schema, store := schemaStores(t, drv)
		a, aq := store("a"), store("a_queue")
		for _, s := range []*lease.Store{a, aq} {
			if err := lease.MigrateTo(ctx, s, 5); err != nil {
				t.Fatal(err)
			}
		}
		applied, err := a.Migrate(ctx)
		if err == nil {
			t.Fatalf("Migrate of a with a_queue at version 5: applied %v, no error; a_queue_ready_idx is now on %q, a_ready_idx exists: %v; want a collision naming a_queue_ready_idx",
				applied, indexTable(t, db, schema, "a_queue_ready_idx"), exists(t, db, schema, "a_ready_idx"))
		}
		onAQueue := "an index on table " + lease.QuoteIdent(schema) + `."a_queue"`
		collides(t, err, schema, "a", []string{"a_queue_ready_idx", "a_queue_lease_idx"}, []string{onAQueue, onAQueue})
		for _, idx := range []string{"a_ready_idx", "a_lease_idx"} {
			if got := indexTable(t, db, schema, idx); got != "a" {
				t.Errorf("%s is on %q after the refusal; want a", idx, got)
			}
		}

		if _, err := aq.Migrate(ctx); err != nil {
			t.Fatalf("Migrate of a_queue: %v", err)
		}
		if _, err := a.Migrate(ctx); err != nil {
			t.Fatalf("Migrate of a once a_queue's index is gone: %v", err)
		}
		for idx, table := range map[string]string{"a_queue_ready_idx": "a", "a_queue_queue_ready_idx": "a_queue", "a_queue_lease_idx": "a", "a_queue_queue_lease_idx": "a_queue"} {
			if got := indexTable(t, db, schema, idx); got != table {
				t.Errorf("index %s is on %q; want %s", idx, got, table)
			}
		}

		db2, schema2, store2 := schemaStores(t, drv)
		if _, err := store2("a").Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = store2("a_queue").Migrate(ctx)
		collides(t, err, schema2, "a_queue", []string{"a_queue_ready_idx", "a_queue_lease_idx"},
			[]string{"an index on table " + lease.QuoteIdent(schema2) + `."a"`, "an index on table " + lease.QuoteIdent(schema2) + `."a"`})
		if exists(t, db2, schema2, "a_queue") {
			t.Error("the table a_queue was created")
		}
	})
}

// What is the table's own is never a collision: a table migrated by
// Migrate, migrated again, upgraded from each earlier version, or given a
// step again (each from migration 3 on is written to be rerun); and an
// index an operator built by hand under its name before the step that
// creates it (as migrations 3 and 9 advise on a large table).
func TestMigrateTakesItsOwnObjects(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		db, schema, store := schemaStores(t, drv)
		all := lease.Migrations()
		for _, m := range all {
			s := store(fmt.Sprintf("from_%d", m.Version))
			if err := lease.MigrateTo(ctx, s, m.Version); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Errorf("upgrade from version %d: %v", m.Version, err)
			}
			if applied, err := s.Migrate(ctx); err != nil || len(applied) != 0 {
				t.Errorf("Migrate again after the upgrade from %d: %v, %v", m.Version, applied, err)
			}
		}
		for _, m := range all[2:] {
			s := store(fmt.Sprintf("rerun_%d", m.Version))
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "DELETE FROM "+lease.QuoteIdent(schema)+"."+lease.QuoteIdent(s.Table()+"_migrations")+" WHERE version = $1", m.Version); err != nil {
				t.Fatal(err)
			}
			if applied, err := s.Migrate(ctx); err != nil || !slices.Equal(applied, []int{m.Version}) {
				t.Errorf("Migrate with migration %d unrecorded: %v, %v; want it applied again", m.Version, applied, err)
			}
		}
		s := store("by_hand")
		if err := lease.MigrateTo(ctx, s, 8); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "CREATE INDEX CONCURRENTLY by_hand_failed_idx ON "+s.QualifiedTable()+" (finished_at) WHERE status = 'FAILED'"); err != nil {
			t.Fatal(err)
		}
		var after8 []int
		for _, m := range all {
			if m.Version > 8 {
				after8 = append(after8, m.Version)
			}
		}
		if applied, err := s.Migrate(ctx); err != nil || !slices.Equal(applied, after8) {
			t.Errorf("Migrate with the failed index built by hand: %v, %v; want %v", applied, err, after8)
		}
		if got := indexTable(t, db, schema, "by_hand_failed_idx"); got != "by_hand" {
			t.Errorf("by_hand_failed_idx is on %q", got)
		}
	})
}
