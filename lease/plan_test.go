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

// explainPrepared prepares st on conn, explains its execution with args (SQL
// literals) under plan_cache_mode mode, and returns the plan.
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
	rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE p("+args+")")
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

var planNode = regexp.MustCompile(`^\s*(->\s+)?([A-Z][A-Za-z ]+?)\s+(using \S+ on \S+( \S+)?\s+)?\(cost`)

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
// batched guarded write on a table of 20,000 INPROGRESS rows, with custom
// and with generic plans (a driver's cached prepared statement): the rows
// are locked first, in id order (LockRows over a primary-key index scan,
// which returns rows in id order, or over a Sort by id), the write reads
// the table through its primary key only, and nothing is read
// sequentially.
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

	// A batch of 100 claims, given in descending id order.
	var ids, gens, delays, texts []string
	for id := 19_900; id > 19_800; id-- {
		ids, gens = append(ids, fmt.Sprint(id)), append(gens, "1")
		delays, texts = append(delays, "0"), append(texts, `"boom"`)
	}
	arr := func(xs []string) string { return "'{" + strings.Join(xs, ",") + "}'" }
	args := map[string]string{
		"complete":       arr(ids) + ", " + arr(gens),
		"completeDelete": arr(ids) + ", " + arr(gens),
		"retry":          arr(ids) + ", " + arr(gens) + ", " + arr(delays) + ", " + arr(texts),
		"fail":           arr(ids) + ", " + arr(gens) + ", " + arr(texts),
		"renew":          arr(ids) + ", " + arr(gens) + ", 30000000",
		"release":        arr(ids) + ", " + arr(gens) + ", 'channel'",
	}
	pkeyScan := "Index Scan using " + s.Table() + "_pkey on " + s.Table()
	for name, st := range lease.GuardedWrites(s) {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainPrepared(t, conn, mode, st, args[name])
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
		}
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.Progress(s), "19900, 1, '\\x00'")
		if !strings.Contains(plan, pkeyScan+" o ") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("progress, %s: the write does not read its row through the primary key:\n%s", mode, plan)
		}
	}
}
