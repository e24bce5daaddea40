package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// explainPrepared prepares st on conn and runs it with args (SQL literals)
// under plan_cache_mode mode, in a transaction it rolls back, and returns
// the plan as EXPLAIN (ANALYZE) reports it: the rows each node read and
// threw away.
func explainPrepared(t *testing.T, conn *sql.Conn, mode string, st lease.Statement, args string) string {
	t.Helper()
	return explainPreparedWith(t, conn, "ANALYZE, COSTS OFF", mode, st, args)
}

// explainPreparedWith is explainPrepared with EXPLAIN's options given.
func explainPreparedWith(t *testing.T, conn *sql.Conn, options, mode string, st lease.Statement, args string) string {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		"SET plan_cache_mode = " + mode,
		"PREPARE p(" + st.Types + ") AS " + st.Query,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer conn.ExecContext(ctx, "DEALLOCATE p")
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return explainIn(t, tx, "EXPLAIN ("+options+") EXECUTE p("+args+")")
}

// explainIn runs an EXPLAIN statement in tx and returns its plan, a line
// a row.
func explainIn(t *testing.T, tx *sql.Tx, explain string) string {
	t.Helper()
	rows, err := tx.QueryContext(context.Background(), explain)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

var planNode = regexp.MustCompile(`^\s*(->\s+)?([A-Z][A-Za-z ]+?)\s+(using \S+ on \S+( \S+)?\s+)?\((cost|actual)`)

// shortLines cuts every line of plan to 200 bytes: a custom plan spells
// out the batch's 1,000 ids.
func shortLines(plan string) string {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if len(l) > 200 {
			lines[i] = l[:200] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// lockOrder returns what the LockRows node of plan reads its rows from, with
// its sort key, or "" when the plan has no LockRows.
func lockOrder(plan string) string {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "LockRows") {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if m := planNode.FindStringSubmatch(lines[j]); m != nil {
				child := strings.TrimSpace(m[2] + " " + m[3])
				if m[2] == "Sort" && j+1 < len(lines) {
					child += " " + strings.TrimSpace(lines[j+1])
				}
				return child
			}
		}
	}
	return ""
}

// TestGuardedWritesLockInIDOrderWhateverThePlan checks the plan of every
// batched guarded write, for a batch of 1,000 claims on a table of 20,000
// INPROGRESS rows, with custom and with generic plans (a driver's cached
// prepared statement): the rows are locked first, in id order (LockRows
// over a primary-key index scan, which returns rows in id order, or over a
// Sort by id), the write reads the table through its primary key only,
// never the lease index (which holds every in-flight row), nothing is read
// sequentially, and no join throws rows away: a join of the rows with the
// batch's arrays under a generic plan looped over the whole batch for each
// row (999,000 rows removed for 1,000 claims).
//
// It runs through each driver, whose pool holds the connection the
// statements are prepared on, and checks the single-row progress write too:
// it reads its row through the primary key under either plan.
func TestGuardedWritesLockInIDOrderWhateverThePlan(t *testing.T) {
	pgtest.EachDriver(t, testGuardedWritePlans)
}

func testGuardedWritePlans(t *testing.T, drv leasework.Driver) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.EnqueueN(t, s, 20_000, "k")
	for range 2 {
		if _, err := s.Claim(ctx, lease.ClaimRequest{Limit: lease.MaxClaimLimit, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// A batch of 1,000 claims, given in descending id order.
	var ids, gens, retries, fails []string
	for id := 19_900; id > 18_900; id-- {
		ids = append(ids, fmt.Sprint(id))
		gens = append(gens, fmt.Sprintf(`"%d":[1]`, id))
		retries = append(retries, fmt.Sprintf(`"%d":[1,0,"boom"]`, id))
		fails = append(fails, fmt.Sprintf(`"%d":[1,"boom"]`, id))
	}
	idArray := "'{" + strings.Join(ids, ",") + "}'"
	object := func(xs []string) string { return "'{" + strings.Join(xs, ",") + "}'" }
	args := map[string]string{
		"complete":             idArray + ", " + object(gens),
		"completeDelete":       idArray + ", " + object(gens),
		"completeTx":           idArray + ", " + object(gens),
		"completeDeleteTx":     idArray + ", " + object(gens),
		"completeTaking":       idArray + ", " + object(gens) + ", 'default', 100, '{}', 30000000, 'w'",
		"completeDeleteTaking": idArray + ", " + object(gens) + ", 'default', 100, '{}', 30000000, 'w'",
		"retry":                idArray + ", " + object(retries),
		"fail":                 idArray + ", " + object(fails),
		"renew":                idArray + ", " + object(gens) + ", 30000000",
		"release":              idArray + ", " + object(gens) + ", 'channel'",
	}
	pkeyScan := "Index Scan using " + s.Table() + "_pkey on " + s.Table()
	for name, st := range lease.GuardedWrites(s) {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := shortLines(explainPrepared(t, conn, mode, st, args[name]))
			order := lockOrder(plan)
			inIDOrder := strings.HasPrefix(order, pkeyScan) ||
				(strings.HasPrefix(order, "Sort") && strings.Contains(order, "Sort Key: "+s.Table()+".id"))
			if !inIDOrder {
				t.Errorf("%s, %s: the rows are not locked first in id order (LockRows reads from %q):\n%s", name, mode, order, plan)
			}
			if !strings.Contains(plan, pkeyScan+" o ") {
				t.Errorf("%s, %s: the write does not read its rows through the primary key:\n%s", name, mode, plan)
			}
			if strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, %s: the plan reads the table sequentially:\n%s", name, mode, plan)
			}
			if strings.Contains(plan, s.Table()+"_queue_lease_idx") {
				t.Errorf("%s, %s: the plan reads the lease index, every in-flight row's entry:\n%s", name, mode, plan)
			}
			if strings.Contains(plan, "Rows Removed by Join Filter") {
				t.Errorf("%s, %s: a join throws rows away:\n%s", name, mode, plan)
			}
			if want := fmt.Sprintf("rows=%d loops=1)", len(ids)); !strings.Contains(strings.SplitN(plan, "\n", 2)[0], want) {
				t.Errorf("%s, %s: the write did not write the batch's %d rows:\n%s", name, mode, len(ids), plan)
			}
		}
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.ProgressStatement(s), "19900, 1, '\\x00'")
		if !strings.Contains(plan, pkeyScan+" o ") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("progress, %s: the write does not read its row through the primary key:\n%s", mode, plan)
		}
	}
}

var (
	tableScan = regexp.MustCompile(`^\s*(?:->\s+)?(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Tid Scan|Tid Range Scan)( Backward)? (using \S+ )?on .*\(actual (time=\S+ )?rows=([\d.]+) loops=(\d+)\)`)
	planLine  = regexp.MustCompile(`\(actual (time=\S+ )?rows=[\d.]+ loops=\d+\)|\(never executed\)`)
	removed   = regexp.MustCompile(`Rows Removed by (Filter|Index Recheck): ([\d.]+)`)
	buffers   = regexp.MustCompile(`Buffers: shared hit=(\d+)(?: read=(\d+))?`)
)

// rowsRead returns how many table rows the scans of plan (EXPLAIN ANALYZE)
// read: the rows each returned and those its filter threw away, over all
// its loops; and, with BUFFERS, the shared buffers those scans touched.
func rowsRead(plan string) (rows, bufs int) {
	n, loops, inScan := 0.0, 0.0, false
	for _, l := range strings.Split(plan, "\n") {
		if m := tableScan.FindStringSubmatch(l); m != nil {
			r, _ := strconv.ParseFloat(m[5], 64)
			loops, _ = strconv.ParseFloat(m[6], 64)
			n += r * loops
			inScan = true
			continue
		}
		if planLine.MatchString(l) || strings.HasPrefix(strings.TrimSpace(l), "Planning") {
			inScan = false
			continue
		}
		if !inScan {
			continue
		}
		if m := removed.FindStringSubmatch(l); m != nil {
			r, _ := strconv.ParseFloat(m[2], 64)
			n += r * loops
		}
		if m := buffers.FindStringSubmatch(l); m != nil {
			hit, _ := strconv.Atoi(m[1])
			read, _ := strconv.Atoi(m[2])
			bufs += hit + read
		}
	}
	return int(n), bufs
}

// TestRowStatementsReadTheirRowsOnlyWhateverThePlan: invariant 11 for the
// statements that name rows besides the guarded writes (checked above) —
// the operator's repairs (requeue, discard, cancel), retention, the reads
// by id, event id and key — and for the claim's own search for expired
// leases. On a table with 20,000 DONE and 20,000 FAILED rows of history,
// 20,000 expired leases (first attempts) in the default queue and 20,000 in
// a paused queue, each statement, with custom and with generic plans, reads
// no table sequentially and reads no more rows than it names (or, for a
// requeue by kind or of all, than there are FAILED rows), counting the rows
// its filters throw away. Before, a requeue by id read every FAILED row
// under a generic plan, and every claim read every expired lease of its
// queue, a paused one too, to find those on their last attempt.
func TestRowStatementsReadTheirRowsOnlyWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	const history = 20_000
	if err := leasetest.InsertFinished(ctx, s, history); err != nil {
		t.Fatal(err)
	}
	if err := leasetest.InsertFailed(ctx, s, history); err != nil {
		t.Fatal(err)
	}
	for _, queue := range []string{"default", "held"} {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+`
			(event_id, kind, queue, status, generation, attempt, lease_until)
			SELECT 'expired-' || $2 || '-' || g, 'k', $2, 'INPROGRESS', 1, 1, statement_timestamp() - interval '1 hour'
			FROM generate_series(1, $1::int) AS g`, history, queue); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	in := pgtest.Enqueue(t, s,
		lease.Event{Kind: "repair", EventID: "target failed"},
		lease.Event{Kind: "k", EventID: "target keyed", Key: "key-1"},
		lease.Event{Kind: "k", EventID: "target ready"},
	)
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET status = 'FAILED', finished_at = statement_timestamp(), generation = 1, attempt = 1
		WHERE id = $1 OR id = $2`, in[0].ID, in[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "VACUUM (ANALYZE) "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	failed := history + 2
	st := lease.RowStatements(s)
	cases := []struct {
		name string
		st   lease.Statement
		args string
		max  int // rows it may read
	}{
		{"requeue by id", st["requeueByID"], fmt.Sprintf("'{%d}', 0, 'c'", in[0].ID), 1},
		{"requeue by kind", st["requeue"], "'{repair}', 0, 'c', false", failed},
		{"requeue all", st["requeue"], "'{}', 0, 'c', true", failed},
		{"discard", st["discard"], fmt.Sprintf("%d, 1", in[1].ID), 2},
		{"cancel", st["cancel"], fmt.Sprintf("%d, 'cancelled'", in[2].ID), 2},
		{"deleteFinished", st["deleteFinished"], "0, 100, true", 200},
		{"deleteDiscarded", st["deleteFinished"], "0, 100, false", 200},
		{"get", st["get"], fmt.Sprint(in[2].ID), 1},
		{"getByEvent", st["getByEvent"], "'target ready'", 2},
		{"rejected", st["rejected"], fmt.Sprintf("'{%d}'", in[2].ID), 1},
		{"existing", st["existing"], "'{target ready}'", 2},
		{"copied", st["copied"], fmt.Sprintf("'{%d}'", in[2].ID), 1},
		{"keyHead", st["keyHead"], "'key-1'", 2},
		{"heldKeys", st["heldKeys"], "'', 100", 4},
		{"nextWake", st["nextWake"], "'default', 0", 1 + 10},
		{"claim", lease.ClaimStatement(s), "100, '{}', 60000000, '', 'default', '{}', 0", 2*100 + 10},
		{"claim from floors", lease.ClaimStatement(s), "100, '{}', 60000000, '', 'default', '{1, 0, 1}', 1", 2*100 + 10},
		{"claim of a paused queue", lease.ClaimStatement(s), "100, '{}', 60000000, '', 'held', '{}', 0", 2},
	}
	for _, c := range cases {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := shortLines(explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", mode, c.st, c.args))
			read, bufs := rowsRead(plan)
			t.Logf("%s, %s: %d rows read, in %d buffers", c.name, mode, read, bufs)
			if read > c.max {
				t.Errorf("%s, %s: %d rows read; want at most %d:\n%s", c.name, mode, read, c.max, plan)
			}
			if strings.Contains(plan, "Seq Scan on "+s.Table()) {
				t.Errorf("%s, %s: the plan reads the table sequentially:\n%s", c.name, mode, plan)
			}
		}
	}
}

// tableReads is what a backend has read of a table: its sequential
// scans, and the tuples its scans returned (those a sequential scan read,
// and the entries its indexes' scans returned, before any filter), by the
// server's statistics not yet reported (those of the current transaction,
// and of earlier ones: take the difference of two readings in one
// transaction). It counts the statements of a function the transaction
// called too, which EXPLAIN does not show.
type tableReads struct{ seqScans, tuples int64 }

func (r tableReads) since(before tableReads) tableReads {
	return tableReads{r.seqScans - before.seqScans, r.tuples - before.tuples}
}

func readsOf(t *testing.T, tx *sql.Tx, table string) tableReads {
	t.Helper()
	var r tableReads
	if err := tx.QueryRow(`SELECT pg_stat_get_xact_numscans($1::regclass),
		pg_stat_get_xact_tuples_returned($1::regclass)
		+ (SELECT COALESCE(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)
		   FROM pg_index AS i WHERE i.indrelid = $1::regclass)::bigint`, table).Scan(&r.seqScans, &r.tuples); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPartitionWakeReadsItsSlotsOnlyWhateverThePlan: invariant 11 for
// wake_partitions (migration 19), which every claim runs while a
// partition limit is declared, and for the claim around it. Beside 20,000
// partition slots, each full (a default limit of 1) with 2 rows set aside,
// and 19,200 releases pending on 64 slots (300 each, the releases'
// statistics not yet gathered, so that the planner expects many), with
// custom and with generic plans, the function counts the 61 of those
// slots that still exist (3 were removed: their releases are deleted),
// brings back one row set aside in each, and reads, of the slots and of
// the events table, a few tuples per slot it names, never a whole table;
// and so does a claim of 100 rows of partitions with room beside them.
// Then the default limit is cleared (a release for every slot): the
// function removes the 64 slots it counts and brings back all their rows,
// as boundedly. A join of the releases with the slots (NOT EXISTS) was
// planned here as a hash anti join over a sequential scan of every slot,
// in every claim.
//
// EXPLAIN does not show a function's statements: the reads are the
// server's statistics of the test's transaction, which count them.
func TestPartitionWakeReadsItsSlotsOnlyWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	name := func(suffix string) string {
		return lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_"+suffix)
	}
	slots, releases, wake := name("partition_slots"), name("partition_releases"), name("wake_partitions")
	const partitions, pendingSlots, perSlot, removed = 20_000, 64, 300, 3
	setLimit(t, s, partitionLimit("", 1))
	for _, q := range []string{
		`INSERT INTO ` + slots + ` (partition, used) SELECT 'p-' || g, 1 FROM generate_series(1, ` + fmt.Sprint(partitions) + `) AS g`,
		`INSERT INTO ` + s.QualifiedTable() + ` (event_id, kind, partition_key, status)
		 SELECT 'aside-' || g || '-' || i, 'k', 'p-' || g, 'WAITING'
		 FROM generate_series(1, ` + fmt.Sprint(partitions) + `) AS g, generate_series(1, 2) AS i`,
		// Each of the first slots: one place given back and 99 "look
		// again"s.
		`INSERT INTO ` + releases + ` (slot, n)
		 SELECT s.id, CASE WHEN i = 1 THEN 1 ELSE 0 END
		 FROM (SELECT id FROM ` + slots + ` ORDER BY id LIMIT ` + fmt.Sprint(pendingSlots) + `) AS s,
		      generate_series(1, ` + fmt.Sprint(perSlot) + `) AS i`,
		// Slots removed since, with their rows: their releases count
		// nowhere.
		`WITH gone AS (
		     DELETE FROM ` + slots + ` WHERE id IN (SELECT id FROM ` + slots + ` ORDER BY id LIMIT ` + fmt.Sprint(removed) + `)
		     RETURNING partition)
		 DELETE FROM ` + s.QualifiedTable() + ` WHERE partition_key IN (SELECT partition FROM gone)`,
		// Rows of partitions with room, for the claim: 100 with a slot
		// (used 0), 100 without.
		`INSERT INTO ` + slots + ` (partition) SELECT 'room-' || g FROM generate_series(1, 100) AS g`,
		`INSERT INTO ` + s.QualifiedTable() + ` (event_id, kind, partition_key)
		 SELECT 'room-' || g, 'k', 'room-' || g FROM generate_series(1, 200) AS g`,
		`VACUUM (ANALYZE) ` + s.QualifiedTable(),
		`VACUUM (ANALYZE) ` + slots,
		// The releases' column statistics are left unknown, as they are
		// until autovacuum first analyzes the table: the planner
		// expects a release table's share of the rows for each slot.
		`VACUUM ` + releases,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// Per slot named, a statement reads a few entries of the slots'
	// indexes and of the events' (the rows set aside of its partition);
	// a scan of either table reads 20,000 or more.
	const perSlotNamed = 12
	tables := []string{slots, s.QualifiedTable()}
	// begin begins a transaction under plan_cache_mode mode, and returns
	// it with what the backend had read of each table.
	begin := func(mode string) (*sql.Tx, []tableReads) {
		t.Helper()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("SET LOCAL plan_cache_mode = " + mode); err != nil {
			t.Fatal(err)
		}
		var before []tableReads
		for _, table := range tables {
			before = append(before, readsOf(t, tx, table))
		}
		return tx, before
	}
	bounded := func(step, mode string, tx *sql.Tx, before []tableReads, named int) {
		t.Helper()
		for i, table := range tables {
			r := readsOf(t, tx, table).since(before[i])
			t.Logf("%s, %s: %s: %d sequential scans, %d tuples read", step, mode, table, r.seqScans, r.tuples)
			if r.seqScans > 0 {
				t.Errorf("%s, %s: %s read sequentially (%d scans, %d tuples read)", step, mode, table, r.seqScans, r.tuples)
			}
			if r.tuples > int64(perSlotNamed*named) {
				t.Errorf("%s, %s: %d tuples of %s read for %d slots named; want at most %d",
					step, mode, r.tuples, table, named, perSlotNamed*named)
			}
		}
	}
	// wakeIn runs wake_partitions in a transaction under plan_cache_mode
	// mode, checks its reads, and returns the transaction (for the caller
	// to check and roll back) and the partitions it counted.
	wakeIn := func(step, mode string) (*sql.Tx, []string) {
		t.Helper()
		tx, before := begin(mode)
		var ps string
		if err := tx.QueryRow(`SELECT ` + wake + `('{}')::text`).Scan(&ps); err != nil {
			t.Fatal(err)
		}
		bounded(step, mode, tx, before, 64)
		return tx, strings.Split(strings.Trim(ps, "{}"), ",")
	}
	count := func(tx *sql.Tx, q string, args ...any) int {
		t.Helper()
		var n int
		if err := tx.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		tx, ps := wakeIn("full partitions", mode)
		if len(ps) != 64-removed {
			t.Errorf("full partitions, %s: wake_partitions counted %d partitions; want %d", mode, len(ps), 64-removed)
		}
		if n := count(tx, `SELECT count(*) FROM `+s.QualifiedTable()+` WHERE status = 'READY' AND partition_key LIKE 'p-%'`); n != 64-removed {
			t.Errorf("full partitions, %s: %d rows set aside brought back; want one in each partition counted, %d", mode, n, 64-removed)
		}
		if n := count(tx, `SELECT count(*) FROM `+releases+` AS r WHERE NOT EXISTS (SELECT 1 FROM `+slots+` AS s WHERE s.id = r.slot)`); n != 0 {
			t.Errorf("full partitions, %s: %d releases of removed slots left", mode, n)
		}
		tx.Rollback()

		// A claim of 100 rows of partitions with room, beside them.
		tx, before := begin(mode)
		claims, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 100 {
			t.Errorf("claim, %s: %d rows claimed; want 100", mode, len(claims))
		}
		// The 100 slots of its rows, and the 64 of wake_partitions.
		bounded("claim", mode, tx, before, 100+64)
		tx.Rollback()
	}

	if _, err := s.ClearLimit(ctx, lease.ScopePartition, "", "test"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		// Every slot has a release now: the function takes any 64, among
		// them (in slot order, the removed slots' first) the releases of
		// the removed slots, which it deletes and counts nowhere.
		tx, ps := wakeIn("limit cleared", mode)
		if len(ps) < 64-removed || len(ps) > 64 {
			t.Errorf("limit cleared, %s: wake_partitions counted %d partitions; want %d to 64", mode, len(ps), 64-removed)
		}
		counted := "{" + strings.Join(ps, ",") + "}"
		if n := count(tx, `SELECT count(*) FROM `+slots+` WHERE partition = ANY ($1)`, counted); n != 0 {
			t.Errorf("limit cleared, %s: %d slots of the partitions counted left; want them removed", mode, n)
		}
		back := count(tx, `SELECT count(*) FROM `+s.QualifiedTable()+` WHERE status = 'READY' AND partition_key = ANY ($1)`, counted)
		want := count(tx, `SELECT count(*) FROM `+s.QualifiedTable()+` WHERE partition_key = ANY ($1)`, counted)
		if back != want {
			t.Errorf("limit cleared, %s: %d rows of the partitions counted READY; want all %d (those set aside brought back)", mode, back, want)
		}
		tx.Rollback()
	}
}

var (
	nodeRows    = regexp.MustCompile(`\(actual (?:time=\S+ )?rows=([\d.]+) loops=(\d+)\)`)
	nodeRemoved = regexp.MustCompile(`Rows Removed by (?:Filter|Join Filter|Index Recheck): ([\d.]+)`)
)

// nodeWork is a node of a plan (EXPLAIN ANALYZE) and the rows it handled
// over all its loops: those it returned and those its filters (a join's
// too) threw away. EXPLAIN gives both per loop.
type nodeWork struct {
	line string
	rows float64
}

// planWork returns the work of each node of plan that ran.
func planWork(plan string) []nodeWork {
	var ws []nodeWork
	loops := 0.0
	for _, l := range strings.Split(plan, "\n") {
		if m := nodeRows.FindStringSubmatch(l); m != nil {
			r, _ := strconv.ParseFloat(m[1], 64)
			loops, _ = strconv.ParseFloat(m[2], 64)
			ws = append(ws, nodeWork{strings.TrimSpace(l), r * loops})
			continue
		}
		if m := nodeRemoved.FindStringSubmatch(l); m != nil && len(ws) > 0 {
			r, _ := strconv.ParseFloat(m[1], 64)
			ws[len(ws)-1].rows += r * loops
		}
	}
	return ws
}

// TestPartitionClaimCostsItsBatchNotItsSquareWhateverThePlan: the steps
// of the claim that keep partition limits read each other once, never
// once per row, whatever plan the server makes of them. Their CTEs carry
// no useful row estimates, and a join of two was planned as a nested
// loop: chosen read all of part_fit for each row taken (1,000,000 rows
// for a batch of 1,000, 999,000 of them thrown away by the join),
// part_counted read it twice per slot, part_ranked and part_rooms read
// parts once per row, slot_map read chosen once per row under a
// concurrency limit.
//
// One store under a default partition limit of 2, and seven queues of
// 1,000 rows, each row of a partition of its own, each queue a case of
// the steps: partitions whose slots have room (room); without a slot yet
// (new); full, their rows set aside (full); full, with their places given
// back not yet counted (back); expired leases that keep their places
// (carry); with room and a row set aside each, which the claim takes
// first (aside); of a kind under a concurrency limit too (kinded). A claim
// of 1,000 of each queue, through both claim statements, with custom and
// with generic plans, runs under EXPLAIN (ANALYZE) in a transaction
// rolled back, and does what its case says; no node of its plan handles
// more than perRow rows per row of the batch, over all its loops,
// counting the rows its filters throw away. The bound does not depend on
// the machine's speed: a step that reads a CTE of the batch once per row
// of another handles 1,000 × 1,000 rows, 25 times the bound.
func TestPartitionClaimCostsItsBatchNotItsSquareWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	const n = 1000
	// The largest work per row of a linear step: placed reads a kind
	// limit's 16 slots' ranges (units) for each row, and a few steps read
	// the batch a few times over.
	const perRow = 40
	setLimit(t, s, partitionLimit("", 2))
	setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "limited", Max: lease.MaxLimit})
	q, slots, releases := s.QualifiedTable(),
		lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_partition_slots"),
		lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_partition_releases")
	rows := func(queue, kind string) string {
		return `INSERT INTO ` + q + ` (event_id, kind, queue, partition_key)
			SELECT '` + queue + `-' || g, '` + kind + `', '` + queue + `', '` + queue + `-' || g FROM generate_series(1, ` + fmt.Sprint(n) + `) AS g`
	}
	slotsOf := func(queue string, used int) string {
		return `INSERT INTO ` + slots + ` (partition, used)
			SELECT '` + queue + `-' || g, ` + fmt.Sprint(used) + ` FROM generate_series(1, ` + fmt.Sprint(n) + `) AS g`
	}
	for _, stmt := range []string{
		rows("room", "k"), slotsOf("room", 0),
		rows("new", "k"),
		rows("full", "k"), slotsOf("full", 2),
		rows("back", "k"), slotsOf("back", 2),
		`INSERT INTO ` + releases + ` (slot, n) SELECT id, 2 FROM ` + slots + ` WHERE partition LIKE 'back-%'`,
		slotsOf("carry", 1),
		`INSERT INTO ` + q + ` (event_id, kind, queue, partition_key, partition_slot, status, generation, attempt, lease_until)
		 SELECT 'carry-' || s.id, 'k', 'carry', s.partition, s.id, 'INPROGRESS', 1, 1, statement_timestamp() - interval '1 hour'
		 FROM ` + slots + ` AS s WHERE s.partition LIKE 'carry-%'`,
		rows("aside", "k"), slotsOf("aside", 0),
		`INSERT INTO ` + q + ` (event_id, kind, queue, partition_key, status)
		 SELECT 'aside-waiting-' || g, 'k', 'aside', 'aside-' || g, 'WAITING' FROM generate_series(1, ` + fmt.Sprint(n) + `) AS g`,
		rows("kinded", "limited"), slotsOf("kinded", 0),
		`VACUUM (ANALYZE) ` + q,
		`VACUUM (ANALYZE) ` + slots,
		`VACUUM (ANALYZE) ` + releases,
	} {
		if _, err := s.DB().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	count := func(tx *sql.Tx, query string) int {
		t.Helper()
		var c int
		if err := tx.QueryRow(query).Scan(&c); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return c
	}
	inQueue := func(queue, where string) string {
		return `SELECT count(*) FROM ` + q + ` WHERE queue = '` + queue + `' AND ` + where
	}
	looks := func(queue string) string {
		return `SELECT count(*) FROM ` + releases + ` AS r JOIN ` + slots + ` AS s ON s.id = r.slot
			WHERE r.n = 0 AND s.partition LIKE '` + queue + `-%'`
	}
	cases := []struct {
		queue string
		// what the claim did, each count with the count it must have
		checks map[string]string
	}{
		{"room", map[string]string{
			inQueue("room", "status = 'INPROGRESS' AND partition_slot IS NOT NULL"):         "claimed, each in its slot",
			`SELECT count(*) FROM ` + slots + ` WHERE partition LIKE 'room-%' AND used = 1`: "slots counting their place",
		}},
		{"new", map[string]string{
			inQueue("new", "status = 'INPROGRESS' AND partition_slot IS NOT NULL"):         "claimed, each in its slot",
			`SELECT count(*) FROM ` + slots + ` WHERE partition LIKE 'new-%' AND used = 1`: "slots made",
		}},
		{"full", map[string]string{
			inQueue("full", "status = 'WAITING' AND key IS NULL"): "set aside",
			looks("full"): "look-again releases after them",
		}},
		{"back", map[string]string{
			inQueue("back", "status = 'INPROGRESS' AND partition_slot IS NOT NULL"):         "claimed, each in its slot",
			`SELECT count(*) FROM ` + slots + ` WHERE partition LIKE 'back-%' AND used = 1`: "slots counting their releases and their place",
			// No look-again: their partitions have no rows set aside
			// (TestPartitionLookAgainOfAnotherQueuesRowIsKept).
		}},
		{"carry", map[string]string{
			inQueue("carry", "status = 'INPROGRESS' AND generation = 2 AND partition_slot IS NOT NULL"): "taken back in their slots",
			`SELECT count(*) FROM ` + slots + ` WHERE partition LIKE 'carry-%' AND used = 1`:            "slots still counting one place",
		}},
		{"aside", map[string]string{
			inQueue("aside", "status = 'INPROGRESS' AND event_id LIKE 'aside-waiting-%'"):    "rows set aside claimed",
			`SELECT count(*) FROM ` + slots + ` WHERE partition LIKE 'aside-%' AND used = 1`: "slots counting their place",
		}},
		{"kinded", map[string]string{
			inQueue("kinded", "status = 'INPROGRESS' AND partition_slot IS NOT NULL AND kind_slot IS NOT NULL"): "claimed, each in its partition's slot and its kind's",
		}},
	}
	statements := []struct {
		name string
		st   lease.Statement
	}{{"claim", lease.ClaimStatement(s)}, {"fair claim", lease.ClaimFairStatement(s)}}
	for _, c := range cases {
		for _, st := range statements {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				for _, stmt := range []string{"SET plan_cache_mode = " + mode, "PREPARE p(" + st.st.Types + ") AS " + st.st.Query} {
					if _, err := conn.ExecContext(ctx, stmt); err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				plan := explainIn(t, tx, fmt.Sprintf("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE p(%d, '{}', 60000000, '', '%s', '{}', 0)", n, c.queue))
				for query, what := range c.checks {
					if got := count(tx, query); got != n {
						t.Errorf("%s, %s, %s: %d rows %s; want %d", c.queue, st.name, mode, got, what, n)
					}
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "DEALLOCATE p"); err != nil {
					t.Fatal(err)
				}
				most := nodeWork{}
				for _, w := range planWork(plan) {
					if w.rows > perRow*n {
						t.Errorf("%s, %s, %s: a node handles %.0f rows for a batch of %d; want at most %d: %s",
							c.queue, st.name, mode, w.rows, n, perRow*n, w.line)
					}
					if w.rows > most.rows {
						most = w
					}
				}
				t.Logf("%s, %s, %s: at most %.0f rows in a node (%s)", c.queue, st.name, mode, most.rows, most.line)
				if t.Failed() && testing.Verbose() {
					t.Logf("%s", shortLines(plan))
				}
			}
		}
	}
}

// TestFairClaimReadsItsPartitionsOnlyWhateverThePlan: a claim of a fair
// queue reads the partitions it takes rows of, and the arrivals it takes,
// through their indexes, whatever plan the server makes of it. A fair
// queue of 1,000 partitions with 3 due rows each, all known to fair
// scheduling, 200 more just come (an arrival each), and a backlog of
// 10,000 rows of no partition and 20,000 DONE rows beside them: a claim
// of 500 rows, with custom and with generic plans, under EXPLAIN
// (ANALYZE) in a transaction rolled back, takes 500 rows, never scans the
// events table whole, and no node of its plan handles more than 40 rows
// per row of the batch (rows its filters throw away counted). It found
// the passes moved by a lookup of the batch's counts once per partition
// (238,000 rows for 500).
func TestFairClaimReadsItsPartitionsOnlyWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	const n, perRow = 500, 40
	setWeight(t, s, lease.Weight{Queue: "fair", Weight: 1})
	q := s.QualifiedTable()
	keys := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_fair_keys")
	for _, stmt := range []string{
		`INSERT INTO ` + q + ` (event_id, kind, queue, partition_key)
		 SELECT 'f-' || g || '-' || r, 'k', 'fair', 'p-' || g FROM generate_series(1, 1000) AS g, generate_series(1, 3) AS r`,
		`INSERT INTO ` + keys + ` (queue, partition, pass) SELECT 'fair', 'p-' || g, g / 1000.0 FROM generate_series(1, 1000) AS g`,
		`INSERT INTO ` + q + ` (event_id, kind, queue, partition_key)
		 SELECT 'n-' || g, 'k', 'fair', 'new-' || g FROM generate_series(1, 200) AS g`,
		`INSERT INTO ` + q + ` (event_id, kind, queue) SELECT 'plain-' || g, 'k', 'fair' FROM generate_series(1, 10000) AS g`,
		`INSERT INTO ` + q + ` (event_id, kind, queue, status, finished_at) SELECT 'done-' || g, 'k', 'fair', 'DONE', now() FROM generate_series(1, 20000) AS g`,
		`VACUUM (ANALYZE) ` + q,
		`VACUUM (ANALYZE) ` + keys,
	} {
		if _, err := s.DB().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := lease.ClaimFairStatement(s)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, stmt := range []string{"SET plan_cache_mode = " + mode, "PREPARE p(" + st.Types + ") AS " + st.Query} {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan := explainIn(t, tx, fmt.Sprintf("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE p(%d, '{}', 60000000, '', 'fair', '{}', 0)", n))
		var claimed int
		if err := tx.QueryRow(`SELECT count(*) FROM ` + q + ` WHERE status = 'INPROGRESS'`).Scan(&claimed); err != nil {
			t.Fatal(err)
		}
		if claimed != n {
			t.Errorf("%s: claimed %d; want %d", mode, claimed, n)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "DEALLOCATE p"); err != nil {
			t.Fatal(err)
		}
		// The events table is never scanned whole. (The small tables of
		// fair scheduling may be: a queue's partitions, its arrivals.)
		if strings.Contains(plan, "Seq Scan on events ") {
			var scans []string
			for _, l := range strings.Split(plan, "\n") {
				if strings.Contains(l, "Seq Scan on events ") {
					scans = append(scans, strings.TrimSpace(l))
				}
			}
			t.Errorf("%s: the fair claim scans a table whole: %s", mode, strings.Join(scans, "; "))
		}
		most := nodeWork{}
		for _, w := range planWork(plan) {
			if w.rows > perRow*n {
				t.Errorf("%s: a node handles %.0f rows for a batch of %d; want at most %d: %s", mode, w.rows, n, perRow*n, w.line)
			}
			if w.rows > most.rows {
				most = w
			}
		}
		t.Logf("%s: at most %.0f rows in a node (%s)", mode, most.rows, most.line)
	}
}

// TestHandingOnReadsTheReadyIndexWhateverThePlan: a completion that takes
// turns under concurrency limits hands its places on to the next due rows
// of its queue, read through the READY index, whatever plan the server
// makes of it. Under a kind and a queue limit that do not bind, 20,000
// rows READY when the table's statistics were taken (most of the table),
// 100 of them claimed: their completion, with custom and with generic
// plans, under EXPLAIN (ANALYZE) in a transaction rolled back, hands on
// its 100 places and never scans the events table whole. It found a
// generic plan scanning it once per priority level (130 ms a completion
// at 50,000 rows, where the claim took 15).
func TestHandingOnReadsTheReadyIndexWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: lease.MaxLimit})
	setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: lease.MaxLimit})
	q := s.QualifiedTable()
	for _, stmt := range []string{
		`INSERT INTO ` + q + ` (event_id, kind) SELECT 'e-' || g, 'k' FROM generate_series(1, 20000) AS g`,
		`VACUUM (ANALYZE) ` + q,
	} {
		if _, err := s.DB().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 100, Lease: time.Minute, Worker: "w"})
	if err != nil || len(cs) != 100 {
		t.Fatalf("claim: %d claims, %v; want 100", len(cs), err)
	}
	var ids, gens []string
	for _, c := range cs {
		ids = append(ids, fmt.Sprint(c.ID))
		gens = append(gens, fmt.Sprintf(`"%d":[%d]`, c.ID, c.Generation))
	}
	args := "'{" + strings.Join(ids, ",") + "}', '{" + strings.Join(gens, ",") + "}', 'default', 100, '{}', 30000000, 'w'"
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.GuardedWrites(s)["completeTaking"], args)
		if strings.Contains(plan, "Seq Scan on "+s.Table()+" ") {
			t.Errorf("%s: the completion scans the events table whole:\n%s", mode, shortLines(plan))
		}
		handed := ""
		if i := strings.Index(plan, "CTE handed"); i >= 0 {
			_, handed, _ = strings.Cut(plan[i:], "\n")
			handed, _, _ = strings.Cut(handed, "\n")
		}
		if !strings.Contains(handed, "Update on "+s.Table()+" ") || !strings.Contains(handed, " rows=100 ") {
			t.Errorf("%s: the completion hands on no 100 places (%q):\n%s", mode, handed, shortLines(plan))
		}
	}
}
