package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	all := lease.Migrations()
	latest := all[len(all)-1].Version
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			drv := d.New()
			schema := freshSchema(t, pgtest.Open(t, drv), drv)
			args := func(more ...string) []string {
				return append(more, "-dsn", pgtest.DSN(t), "-driver", d.Name, "-schema", schema, "-table", "jobs")
			}

			r := must(t, exitOK, args("migrate")...)
			for _, m := range all {
				if !strings.Contains(r.stdout, m.Name) {
					t.Errorf("first migrate does not report migration %d (%s):\n%s", m.Version, m.Name, r.stdout)
				}
			}

			r = must(t, exitOK, args("migrate", "-json")...)
			var again migrateJSON
			decode(t, r, &again)
			if len(again.Applied) != 0 || again.Version != latest || again.Schema != schema || again.Table != "jobs" {
				t.Fatalf("second migrate = %+v; want nothing applied, version %d", again, latest)
			}
			r = must(t, exitOK, args("migrate")...)
			if !strings.Contains(r.stdout, "nothing to apply") {
				t.Fatalf("third migrate printed %q; want \"nothing to apply\"", r.stdout)
			}

			// The table it made works: stats reads it.
			r = must(t, exitOK, args("stats", "-json")...)
			var st statsJSON
			decode(t, r, &st)
			zero := map[leasework.Status]int64{}
			for _, status := range leasework.Statuses() {
				zero[status] = 0
			}
			if !reflect.DeepEqual(st, statsJSON{Schema: schema, Table: "jobs", Rows: zero, Held: []heldKeyJSON{}, PausedQueues: []string{}}) {
				t.Fatalf("stats of a new table = %+v; want all zero", st)
			}
		})
	}
}

func TestMigrateJSONListsAppliedMigrations(t *testing.T) {
	t.Parallel()
	drv := pgtest.Drivers[0].New()
	schema := freshSchema(t, pgtest.Open(t, drv), drv)
	r := must(t, exitOK, "migrate", "-json", "-dsn", pgtest.DSN(t), "-schema", schema)
	var got migrateJSON
	decode(t, r, &got)
	all := lease.Migrations()
	if len(got.Applied) != len(all) {
		t.Fatalf("applied = %+v; want all %d migrations", got.Applied, len(all))
	}
	for i, m := range all {
		if got.Applied[i] != (migrationJSON{Version: m.Version, Name: m.Name}) {
			t.Errorf("applied[%d] = %+v; want %d %s", i, got.Applied[i], m.Version, m.Name)
		}
	}
	if got.Table != lease.DefaultTable {
		t.Errorf("table = %q; want the default %q", got.Table, lease.DefaultTable)
	}
}

// migrate -print needs no database: it prints every migration for the
// schema and table given, with whether workers may run.
func TestMigratePrintNeedsNoDatabase(t *testing.T) {
	r := must(t, exitOK, "migrate", "-print", "-schema", "shop", "-table", "outbox")
	for _, want := range []string{
		"-- leasework migration 1 (create_table): may be applied while workers run",
		"-- leasework migration 5 (event_ids): apply with every worker and producer of the previous version stopped",
		`CREATE TABLE "shop"."outbox"`,
		`INSERT INTO "shop"."outbox_migrations" (version, name)`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate -print lacks %q", want)
		}
	}
	var scripts []scriptJSON
	decode(t, must(t, exitOK, "migrate", "-print", "-json"), &scripts)
	if len(scripts) != len(lease.Migrations()) || !strings.Contains(scripts[0].SQL, `"leasework"."events"`) {
		t.Errorf("migrate -print -json: %d scripts; want %d, for leasework.events", len(scripts), len(lease.Migrations()))
	}
	if r := must(t, exitError, "migrate", "-print", "-schema", "Shop"); !strings.Contains(r.stderr, "upper case") {
		t.Errorf("migrate -print -schema Shop: stderr %q; want the name refused", r.stderr)
	}
}

// version needs no database and names the schema version migrate reaches.
func TestVersion(t *testing.T) {
	var v versionJSON
	decode(t, must(t, exitOK, "version", "-json"), &v)
	all := lease.Migrations()
	if v.Version == "" || !strings.HasPrefix(v.Go, "go") || v.SchemaVersion != all[len(all)-1].Version {
		t.Errorf("version -json = %+v; want a version, the Go release and schema version %d", v, all[len(all)-1].Version)
	}
	if r := must(t, exitOK, "version"); !strings.HasPrefix(r.stdout, "leasework ") {
		t.Errorf("version: %q", r.stdout)
	}
}

// A table whose derived names are taken by another table's objects is not
// migrated: migrate exits 1, names each object, what has its name, and
// the fix in the command's own flags; nothing is created.
func TestMigrateReportsANameCollision(t *testing.T) {
	t.Parallel()
	drv := pgtest.Drivers[0].New()
	db := pgtest.Open(t, drv)
	schema := freshSchema(t, db, drv)
	args := []string{"migrate", "-dsn", pgtest.DSN(t), "-schema", schema}
	must(t, exitOK, append(args, "-table", "jobs_queues")...)
	r := must(t, exitError, append(args, "-table", "jobs")...)
	for _, want := range []string{`"jobs_queues", its table of paused queues, is a table without the columns`, "another table name", "-table", "-schema", "not applied"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("leasework migrate -table jobs beside the events table jobs_queues: stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	var exists bool
	if err := db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, lease.QuoteIdent(schema)+".jobs").Scan(&exists); err != nil || exists {
		t.Errorf("the table jobs exists after the refusal: %v, %v", exists, err)
	}
}
