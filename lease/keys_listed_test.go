package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// keyLine is a key's rows in line: event ids in key_seq order, and their
// statuses.
type keyLine struct {
	ids, statuses []string
}

// linesOf reads each key's rows in line, and fails on a keyed row that is
// not in line (key_seq NULL) after its commit.
func linesOf(t *testing.T, s *lease.Store) map[string]keyLine {
	t.Helper()
	rows, err := s.DB().Query(`SELECT event_id, key, key_seq, status FROM ` + s.QualifiedTable() + `
		WHERE key IS NOT NULL ORDER BY key, key_seq NULLS FIRST`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	lines := map[string]keyLine{}
	for rows.Next() {
		var id, key, status string
		var seq sql.NullInt64
		if err := rows.Scan(&id, &key, &seq, &status); err != nil {
			t.Fatal(err)
		}
		if !seq.Valid {
			t.Errorf("event %s of key %s is %s and not in line (no key_seq) after its commit", id, key, status)
		}
		l := lines[key]
		l.ids, l.statuses = append(l.ids, id), append(l.statuses, status)
		lines[key] = l
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// checkLines checks that each key of want has its rows in line in that
// order, the first READY and the others WAITING.
func checkLines(t *testing.T, s *lease.Store, want map[string][]string) {
	t.Helper()
	got := linesOf(t, s)
	for key, ids := range want {
		if !slices.Equal(got[key].ids, ids) {
			t.Errorf("key %s in line: %v; want %v (the order given)", key, got[key].ids, ids)
			continue
		}
		for i, st := range got[key].statuses {
			if w := map[bool]string{true: "READY", false: "WAITING"}[i == 0]; st != w {
				t.Errorf("key %s: event %s is %s; want %s", key, ids[i], st, w)
			}
		}
	}
}

func keyed(key string, ids ...string) []lease.Event {
	var es []lease.Event
	for _, id := range ids {
		es = append(es, lease.Event{EventID: id, Kind: "k", Key: key})
	}
	return es
}

// TestEnqueueTransactionPutsItsKeysInLineInOneStep: a transaction's keyed
// rows, from several statements (Enqueue, EnqueueWith skipping duplicates,
// an INSERT of the application's own), are listed as they are inserted,
// in the order given, and put in line by one call of order_keys at the
// first firing of the commit-time trigger (migration 14): the transaction
// takes the key locks once (leasework.key_locks counts the calls), not
// once a row. A savepoint rolled back takes its rows off the list. The
// rows end in line in the order given, behind the key's earlier rows.
// Through every enqueue path (the INSERT, COPY).
func TestEnqueueTransactionPutsItsKeysInLineInOneStep(t *testing.T) {
	pgtest.EachEnqueuePath(t, func(t *testing.T, p pgtest.EnqueuePath) {
		s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
		ctx := context.Background()
		pgtest.Enqueue(t, s, keyed("b", "b0")...)

		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := s.Enqueue(ctx, tx, append(keyed("a", "a1"), append(keyed("b", "b1"), keyed("a", "a2")...)...)...); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, tx, keyed("a", "rolled-back")...); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT gone"); err != nil {
			t.Fatal(err)
		}
		out, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
			append(keyed("c", "c1"), append(keyed("a", "a3", "b0"), keyed("b", "b2")...)...)...)
		if err != nil || !out[2].Duplicate {
			t.Fatalf("enqueue skipping duplicates: %v, %v; want b0 skipped", out, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind, key) VALUES ('a4', 'k', 'a'), ('keyless', 'k', NULL)`); err != nil {
			t.Fatal(err)
		}
		var listed string
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(string_agg(o.event_id, ' ' ORDER BY l.n), '')
			FROM unnest(string_to_array(current_setting($1), ',')::bigint[]) WITH ORDINALITY AS l(id, n)
			LEFT JOIN `+s.QualifiedTable()+` AS o ON o.id = l.id`, lease.KeysListed(s)).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		// Enqueue inserts in key order, and in the order given within a key.
		if want := "a1 a2 b1 a3 b2 c1 a4"; listed != want {
			t.Errorf("the transaction's list: %q; want %q", listed, want)
		}
		// The commit-time step, fired early, in this transaction.
		trigger := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_order_key")
		if _, err := tx.ExecContext(ctx, "SET CONSTRAINTS "+trigger+" IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		var locks, left string
		if err := tx.QueryRowContext(ctx, `SELECT current_setting('leasework.key_locks'), current_setting($1)`, lease.KeysListed(s)).Scan(&locks, &left); err != nil {
			t.Fatal(err)
		}
		if locks != "1" || left != "" {
			t.Errorf("after the commit-time step: key_locks %q, keys_listed %q; want the keys locked by one call, and the list emptied", locks, left)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		checkLines(t, s, map[string][]string{"a": {"a1", "a2", "a3", "a4"}, "b": {"b0", "b1", "b2"}, "c": {"c1"}})
	})
}

// TestKeysPutInLineWhenTheListIsFull: once a transaction's list passes
// its bound (128 KiB of ids: 6,900 of 18 digits), it is dropped and stays full, and every
// keyed row of the transaction is put in line by its own firing, in the
// order inserted: the rows listed before do not overtake the later ones.
// Through every enqueue path.
func TestKeysPutInLineWhenTheListIsFull(t *testing.T) {
	pgtest.EachEnqueuePath(t, testKeysPutInLineWhenTheListIsFull)
}

func testKeysPutInLineWhenTheListIsFull(t *testing.T, p pgtest.EnqueuePath) {
	s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
	ctx := context.Background()
	// Row ids of 18 digits: the list fills with a few thousand rows.
	if _, err := s.DB().ExecContext(ctx, `SELECT setval(pg_get_serial_sequence($1, 'id'), 100000000000000000)`, s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	want := map[string][]string{}
	listedFull := func() bool {
		var listed string
		if err := tx.QueryRowContext(ctx, `SELECT current_setting($1)`, lease.KeysListed(s)).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		return listed == "full"
	}
	for call := 0; ; call++ {
		var events []lease.Event
		for i := range 2000 {
			key := "key-" + strconv.Itoa(i%50)
			id := fmt.Sprintf("%d-%d", call, i)
			events = append(events, lease.Event{EventID: id, Kind: "k", Key: key})
			want[key] = append(want[key], id)
		}
		if _, err := s.Enqueue(ctx, tx, events...); err != nil {
			t.Fatal(err)
		}
		if listedFull() {
			if call == 0 {
				t.Fatal("the list is full after the first 2,000 rows; want it to hold them")
			}
			break
		}
		if call > 20 {
			t.Fatal("the list is not full after 42,000 rows of 18-digit ids listed")
		}
	}
	if _, err := s.Enqueue(ctx, tx, keyed("key-0", "last")...); err != nil {
		t.Fatal(err)
	}
	want["key-0"] = append(want["key-0"], "last")
	if !listedFull() {
		t.Error("the list was listed again after it was full")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, s, want)
}

// TestKeysPutInLineByImmediateTriggers: with the commit-time trigger set
// IMMEDIATE, a row's firing comes at the end of its statement, before the
// statement lists it: the firing puts the rows listed so far in line, then
// its own row alone. The order given holds, through every enqueue path.
func TestKeysPutInLineByImmediateTriggers(t *testing.T) {
	pgtest.EachEnqueuePath(t, testKeysPutInLineByImmediateTriggers)
}

func testKeysPutInLineByImmediateTriggers(t *testing.T, p pgtest.EnqueuePath) {
	s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, keyed("a", "a1", "a2")...); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SET CONSTRAINTS ALL IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a3", "a4"} {
		if _, err := s.Enqueue(ctx, tx, keyed("a", id)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, s, map[string][]string{"a": {"a1", "a2", "a3", "a4"}})
}

// TestEnqueuePromotesAStrandedKey: a key whose rows in line are all
// WAITING, none live (a head finished with the release triggers
// disabled), has its first waiting row promoted by the next enqueue of the
// key, whose own rows wait behind it, as the per-row step's settle_key
// did: an enqueue of one event (put in line by its own firing) and of two
// (by order_keys). Through every enqueue path.
func TestEnqueuePromotesAStrandedKey(t *testing.T) {
	pgtest.EachEnqueuePath(t, testEnqueuePromotesAStrandedKey)
}

func testEnqueuePromotesAStrandedKey(t *testing.T, p pgtest.EnqueuePath) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d events", n), func(t *testing.T) {
			s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
			ctx := context.Background()
			pgtest.Enqueue(t, s, keyed("k", "k1", "k2", "k3")...)
			tbl := s.QualifiedTable()
			release := lease.QuoteIdent(s.Table() + "_release_key")
			for _, q := range []string{
				`ALTER TABLE ` + tbl + ` DISABLE TRIGGER ` + release,
				`UPDATE ` + tbl + ` SET status = 'DONE', finished_at = statement_timestamp() WHERE event_id = 'k1'`,
				`ALTER TABLE ` + tbl + ` ENABLE TRIGGER ` + release,
			} {
				if _, err := s.DB().ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			ids, statuses := []string{"k1", "k2", "k3"}, []string{"DONE", "READY", "WAITING"}
			var more []string
			for i := range n {
				more = append(more, fmt.Sprintf("k%d", 4+i))
				statuses = append(statuses, "WAITING")
			}
			pgtest.Enqueue(t, s, keyed("k", more...)...)
			ids = append(ids, more...)
			got := linesOf(t, s)["k"]
			if !slices.Equal(got.statuses, statuses) || !slices.Equal(got.ids, ids) {
				t.Errorf("key k after the enqueue: %v %v; want %v %v", got.ids, got.statuses, ids, statuses)
			}
		})
	}
}

// TestKeysOfTwoTablesInOneTransaction: a transaction that enqueues keyed
// events into two stores' tables, in turns, keeps a list per table, and
// each table's commit-time step puts its own rows in line, in the order
// given, with one call. Through every enqueue path.
func TestKeysOfTwoTablesInOneTransaction(t *testing.T) {
	pgtest.EachEnqueuePath(t, testKeysOfTwoTablesInOneTransaction)
}

func testKeysOfTwoTablesInOneTransaction(t *testing.T, p pgtest.EnqueuePath) {
	drv := p.NewDriver()
	a := pgtest.Store(t, drv, p.Options(lease.Options{}))
	b, err := lease.New(a.DB(), drv, p.Options(lease.Options{Schema: a.Schema(), Table: "other_events"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := a.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := range 3 {
		for _, s := range []*lease.Store{a, b} {
			id := fmt.Sprintf("%s-%d", s.Table(), i)
			if _, err := s.Enqueue(ctx, tx, append(keyed("k", id+"a"), keyed("k", id+"b")...)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*lease.Store{a, b} {
		trigger := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_order_key")
		if _, err := tx.ExecContext(ctx, "SET CONSTRAINTS "+trigger+" IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
	}
	var locks string
	if err := tx.QueryRowContext(ctx, `SELECT current_setting('leasework.key_locks')`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != "2" {
		t.Errorf("key_locks %q after both tables' commit-time steps; want 2, one call each", locks)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*lease.Store{a, b} {
		var want []string
		for i := range 3 {
			id := fmt.Sprintf("%s-%d", s.Table(), i)
			want = append(want, id+"a", id+"b")
		}
		checkLines(t, s, map[string][]string{"k": want})
	}
}
