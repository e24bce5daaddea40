package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/leasework/leasework/internal/pgtest"
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
			if !reflect.DeepEqual(st, statsJSON{Schema: schema, Table: "jobs", Held: []heldKeyJSON{}, PausedQueues: []string{}}) {
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
