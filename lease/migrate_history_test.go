package lease_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// keyedHistory fills a table at version 3 or later with history (DONE
// rows, keyed and not) and, after it, live rows of keys a to d and of no
// key, in this id order.
func keyedHistory(t *testing.T, s *lease.Store) {
	t.Helper()
	tbl := s.QualifiedTable()
	for _, q := range []string{
		`INSERT INTO ` + tbl + ` (event_id, kind, key, status, attempt, finished_at)
		 SELECT 'h' || g, 'k', CASE WHEN g % 2 = 0 THEN 'k' || (g % 7) END, 'DONE', 1, statement_timestamp()
		 FROM generate_series(1, 200) AS g`,
		`INSERT INTO ` + tbl + ` (event_id, kind, key, status, generation, attempt, lease_until, finished_at)
		 VALUES ('a1', 'k', 'a', 'READY', 0, 0, NULL, NULL),
		        ('b1', 'k', 'b', 'INPROGRESS', 1, 1, statement_timestamp() + interval '1 hour', NULL),
		        ('a2', 'k', 'a', 'READY', 0, 0, NULL, NULL),
		        ('c1', 'k', 'c', 'FAILED', 1, 1, NULL, statement_timestamp()),
		        ('a3', 'k', 'a', 'READY', 0, 0, NULL, NULL),
		        ('b2', 'k', 'b', 'READY', 0, 0, NULL, NULL),
		        ('c2', 'k', 'c', 'READY', 0, 0, NULL, NULL),
		        ('d1', 'k', 'd', 'READY', 0, 0, NULL, NULL),
		        ('n1', 'k', NULL, 'READY', 0, 0, NULL, NULL),
		        ('n2', 'k', NULL, 'READY', 0, 0, NULL, NULL)`,
	} {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// storeAt returns a store whose table is at version v of ms, in a fresh
// schema dropped at the end of the test.
func storeAt(t *testing.T, ms []lease.Migration, v int) *lease.Store {
	t.Helper()
	s, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: pgtest.SchemaName()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DropSchema(context.Background()) })
	if _, err := lease.MigrateWith(context.Background(), s, ms[:v]); err != nil {
		t.Fatal(err)
	}
	return s
}

// Order per key, added to a table with history: the live rows of a key
// enqueued before it are put in order by id, the first staying live and
// the later READY ones waiting; history and keyless rows are left alone;
// and the triggers keep the order from then on.
func TestOrderPerKeyMigrationOrdersEarlierRows(t *testing.T) {
	ctx := context.Background()
	ms := lease.Migrations()
	s := storeAt(t, ms, 3)
	keyedHistory(t, s)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().Query(`SELECT event_id, status, key_seq IS NOT NULL FROM ` + s.QualifiedTable() + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	var history, historySeq int
	for rows.Next() {
		var id, status string
		var seq bool
		if err := rows.Scan(&id, &status, &seq); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(id, "h") {
			history++
			if status != "DONE" || seq {
				historySeq++
			}
			continue
		}
		got = append(got, fmt.Sprintf("%s %s %v", id, status, seq))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a1 READY true", "b1 INPROGRESS true", "a2 WAITING true", "c1 FAILED true", "a3 WAITING true",
		"b2 WAITING true", "c2 WAITING true", "d1 READY true", "n1 READY false", "n2 READY false",
	}
	if !slices.Equal(got, want) {
		t.Errorf("live rows after the migration:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if history != 200 || historySeq != 0 {
		t.Errorf("history: %d rows, %d of them changed; want 200 DONE rows without key_seq", history, historySeq)
	}
	var ordered bool
	if err := s.DB().QueryRow(`SELECT array_agg(key_seq ORDER BY id) = array_agg(key_seq ORDER BY key_seq)
		FROM ` + s.QualifiedTable() + ` WHERE key_seq IS NOT NULL`).Scan(&ordered); err != nil || !ordered {
		t.Errorf("key_seq in id order: %v, %v; want true", ordered, err)
	}

	// From now on the triggers keep the order.
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "d", EventID: "d2"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, c := range claims {
		claimed = append(claimed, c.EventID)
		if c.EventID == "a1" {
			if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(claimed)
	if want := []string{"a1", "d1", "n1", "n2"}; !slices.Equal(claimed, want) {
		t.Errorf("claimed %v; want %v (each key's head and the keyless rows)", claimed, want)
	}
	for id, want := range map[string]string{"a2": "READY", "a3": "WAITING", "d2": "WAITING"} {
		r, err := s.GetByEventID(ctx, id)
		if err != nil || string(r.Status) != want {
			t.Errorf("%s: %v, %v; want %s", id, r.Status, err, want)
		}
	}
}

// A step run outside a transaction that fails part-way is run again from
// its first statement by the next Migrate, which must end where a run
// without the failure ends: for each such step and each statement it
// could fail after (the last: its record), a table with history on which
// Migrate failed there, migrated again to that step, has the table,
// indexes, constraints (validated or not), triggers, functions and rows of
// a table migrated at once to that step. (Compared right after the step,
// not after every later one: a later step could hide a difference, and
// running them for every case only costs time.)
func TestStepsOutsideATransactionRunAgainAfterFailingPartWay(t *testing.T) {
	ctx := context.Background()
	ms := lease.Migrations()
	checked := 0
	for i, m := range ms {
		if !m.NoTransaction {
			continue
		}
		checked++
		fresh := func() *lease.Store {
			s := storeAt(t, ms, i)
			keyedHistory(t, s)
			return s
		}
		upTo := ms[:i+1]
		clean := fresh()
		if _, err := lease.MigrateWith(ctx, clean, upTo); err != nil {
			t.Fatal(err)
		}
		want := schemaState(t, clean)
		n := len(lease.Statements(lease.RenderedSQL(clean, m)))
		for k := 1; k <= n; k++ {
			s := fresh()
			// The step as Migrate runs it, failing after its first k
			// statements.
			stmts := lease.Statements(lease.RenderedSQL(s, m))[:k]
			failing, err := lease.NewMigration(m.Version, m.Name, "-- leasework: workers running\n-- leasework: no transaction\n"+
				strings.Join(stmts, "\n")+"\nSELECT 1 / 0;\n")
			if err != nil {
				t.Fatal(err)
			}
			_, err = lease.MigrateWith(ctx, s, append(ms[:i:i], failing))
			if wantErr := fmt.Sprintf("migration %d (%s), statement %d", m.Version, m.Name, k+1); err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("Migrate failing after %d statements of migration %d: %v; want an error in its statement %d", k, m.Version, err, k+1)
			}
			applied, err := lease.MigrateWith(ctx, s, upTo)
			if err != nil || len(applied) != 1 || applied[0] != m.Version {
				t.Errorf("Migrate after a failure after %d of %d statements of migration %d: %v, %v", k, n, m.Version, applied, err)
				continue
			}
			if got := schemaState(t, s); got != want {
				t.Errorf("migration %d run again after failing after %d of %d statements ends elsewhere than a run at once:\n%s",
					m.Version, k, n, diffLines(got, want))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no migration runs outside a transaction")
	}
}

// schemaState describes s's schema and table, names of the schema left
// out: its tables and their columns, constraints (with whether they are
// validated), indexes (with whether they are valid), triggers, functions,
// and the rows' ids, statuses, keys and key order.
func schemaState(t *testing.T, s *lease.Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT c.relname || ' ' || c.relkind::text FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'S') ORDER BY 1`,
		`SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' || COALESCE(pg_get_expr(d.adbin, d.adrelid), '')
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1`,
		`SELECT c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid) || ' validated=' || k.convalidated
		 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = $1::regnamespace ORDER BY 1`,
		`SELECT pg_get_indexdef(i.indexrelid) || ' valid=' || i.indisvalid
		 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = $1::regnamespace ORDER BY 1`,
		`SELECT pg_get_triggerdef(g.oid) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
		 WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal ORDER BY 1`,
		// A function's text names the schema, and the setting in which a
		// transaction lists its keyed rows, named after the table.
		`SELECT p.proname || ' ' || md5(replace(replace(p.prosrc, $1, '<schema>'), '` + lease.KeysListed(s) + `', '<keys listed>'))
		 || ' ' || p.prosecdef || ' ' || COALESCE(array_to_string(p.proconfig, ','), '')
		 FROM pg_proc p WHERE p.pronamespace = $1::regnamespace ORDER BY 1`,
	} {
		rows, err := s.DB().Query(q, s.Schema())
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(strings.ReplaceAll(line, s.Schema(), "<schema>") + "\n")
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var rowsState string
	if err := s.DB().QueryRow(`SELECT string_agg(concat_ws(' ', id, event_id, status, key, key_seq), E'\n' ORDER BY id)
		FROM ` + s.QualifiedTable()).Scan(&rowsState); err != nil {
		t.Fatal(err)
	}
	return b.String() + rowsState
}

// diffLines lists the lines of got not in want, and of want not in got.
func diffLines(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}
