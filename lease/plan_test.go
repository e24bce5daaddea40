package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

// explainPrepared prepares st on conn and runs it with args (SQL literals)
// under plan_cache_mode mode, in a transaction it rolls back, and returns
// the plan as EXPLAIN (ANALYZE) reports it: the rows each node read and
// threw away.
func explainPrepared(t *testing.T, conn *sql.Conn, mode string, st lease.Statement, args string) string {
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
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE p("+args+")")
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
		"complete":       idArray + ", " + object(gens),
		"completeDelete": idArray + ", " + object(gens),
		"retry":          idArray + ", " + object(retries),
		"fail":           idArray + ", " + object(fails),
		"renew":          idArray + ", " + object(gens) + ", 30000000",
		"release":        idArray + ", " + object(gens) + ", 'channel'",
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
		plan := explainPrepared(t, conn, mode, lease.Progress(s), "19900, 1, '\\x00'")
		if !strings.Contains(plan, pkeyScan+" o ") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("progress, %s: the write does not read its row through the primary key:\n%s", mode, plan)
		}
	}
}
