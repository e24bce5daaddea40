package lease_test

import (
	"context"
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

var removedByFilter = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)

// TestClaimPlanIgnoresFinishedRows checks the claim's plan on a table whose
// 20,000 eligible rows sit behind 50,000 finished ones: both eligibility
// branches are index scans, the claimed rows are updated through the primary
// key, nothing is read sequentially, and no finished row is read and thrown
// away by a filter.
func TestClaimPlanIgnoresFinishedRows(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFinished(ctx, s, 50000); err != nil {
		t.Fatal(err)
	}
	pgtest.EnqueueN(t, s, 20_000, "k")
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	plan, err := s.ExplainClaim(ctx, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Index Scan using events_queue_ready_idx", "Index Scan using events_queue_lease_idx",
		"Index Scan using events_pkey on events o ", "rows=100 loops=1"} {
		if !strings.Contains(plan, want) {
			t.Errorf("claim plan lacks %q:\n%s", want, plan)
		}
	}
	for _, bad := range []string{"Seq Scan", "Hash Join"} {
		if strings.Contains(plan, bad) {
			t.Errorf("claim plan has a %s:\n%s", bad, plan)
		}
	}
	for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			t.Errorf("claim plan removes %d rows by filter:\n%s", n, plan)
		}
	}
	got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
	if err != nil || len(got) != 100 || got[0].Generation != 1 {
		t.Fatalf("claim after explain = %d rows, %v; want 100 at generation 1 (explain claims nothing)", len(got), err)
	}
}

// TestClaimPlanIgnoresOtherQueues checks the claim's plan on a table where
// another queue holds 200,000 due READY rows, all older than the claimed
// queue's: the claim reads its own queue's rows through the queue's READY
// index and reads no row of the other queue, with custom and with generic
// plans. (Before queues, a claim restricted to a kind walked past every due
// row of the other kinds: 200,000 removed by filter, 136 ms instead of a
// 2-row scan.)
func TestClaimPlanIgnoresOtherQueues(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertReady(ctx, s, "other", 200_000); err != nil {
		t.Fatal(err)
	}
	pgtest.EnqueueN(t, s, 500, "k")
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	// A prepared statement: EXPLAIN of a statement with parameters bound
	// plans it with their values, so it would never show a generic plan.
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.ClaimStatement(s), "100, ARRAY['k'], 60000000, '', 'default', '{}', 0")
		if mode == "force_generic_plan" && !strings.Contains(plan, "$5") {
			t.Errorf("%s: the plan shows no parameter; it is not generic:\n%s", mode, plan)
		}
		if !strings.Contains(plan, "Index Scan using events_queue_ready_idx") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: claim plan does not read the queue's READY index alone:\n%s", mode, plan)
		}
		for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				t.Errorf("%s: claim plan removes %d rows by filter:\n%s", mode, n, plan)
			}
		}
		if !strings.Contains(strings.SplitN(plan, "\n", 2)[0], "rows=100 loops=1") {
			t.Errorf("%s: the claim did not take 100 rows:\n%s", mode, plan)
		}
	}
}

// TestClaimPlanIgnoresWaitingRows checks the claim's plan on a table where
// 2,000 keys are held by a FAILED event with 10 events waiting behind each:
// the claim reads the due READY rows through their index and no waiting row
// is read and thrown away, so followers cost the claim nothing.
func TestClaimPlanIgnoresWaitingRows(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertWaiting(ctx, s, 2000, 10); err != nil {
		t.Fatal(err)
	}
	pgtest.EnqueueN(t, s, 500, "k")
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	plan, err := s.ExplainClaim(ctx, lease.ClaimRequest{Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan using events_queue_ready_idx") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("claim plan does not read the READY index alone:\n%s", plan)
	}
	for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			t.Errorf("claim plan removes %d rows by filter:\n%s", n, plan)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Rows[leasework.StatusWaiting] != 20000 || st.HeldKeys != 2000 {
		t.Fatalf("stats = %+v, %v; want 20,000 waiting behind 2,000 held keys", st, err)
	}
}

// labClaimSQL is the lab article's claim with its single OR predicate,
// batched like ours: the reference the benchmark measures against.
const labClaimSQL = `
WITH candidate AS (
    SELECT id FROM %[1]s
    WHERE (status = 'READY' AND next_attempt_at <= statement_timestamp())
       OR (status = 'INPROGRESS' AND lease_until <= statement_timestamp())
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS o
SET status = 'INPROGRESS', generation = o.generation + 1, attempt = o.attempt + 1,
    lease_until = statement_timestamp() + interval '30 seconds'
FROM candidate AS c
WHERE o.id = c.id
RETURNING o.id, o.generation`

// BenchmarkClaim measures one claim of 100 rows on a table with no history,
// on one with a million finished rows in front of the eligible ones, on one
// with a million due READY rows in another queue, older than the claimed
// queue's, and on one where 10,000 keys are each held by a FAILED event
// with 10 events WAITING behind it (100,000 waiting events). The claimed rows are completed
// with the timer stopped. The reference is the lab's single-OR claim on the
// lab's indexes (the primary key only). Compare ns/op across sizes:
// leasework's should barely move; the reference's grows with history.
func BenchmarkClaim(b *testing.B) {
	for _, finished := range []int{0, 1_000_000} {
		for _, stmt := range []string{"leasework", "lab-or-pkey-only"} {
			b.Run(fmt.Sprintf("%s/finished=%d", stmt, finished), func(b *testing.B) {
				// With b.Loop this body runs once per -count: each run
				// gets a fresh table.
				benchmarkClaim(b, stmt, func(ctx context.Context, s *lease.Store) error {
					return leasetest.InsertFinished(ctx, s, finished)
				})
			})
		}
	}
	b.Run("leasework/other-queue-ready=1000000", func(b *testing.B) {
		benchmarkClaim(b, "leasework", func(ctx context.Context, s *lease.Store) error {
			return leasetest.InsertReady(ctx, s, "other", 1_000_000)
		})
	})
	b.Run("leasework/waiting=100000/keys=10000", func(b *testing.B) {
		benchmarkClaim(b, "leasework", func(ctx context.Context, s *lease.Store) error {
			return leasetest.InsertWaiting(ctx, s, 10_000, 10)
		})
	})
}

func benchmarkClaim(b *testing.B, stmt string, history func(context.Context, *lease.Store) error) {
	const batch = 100
	s := pgtest.Store(b, drv, lease.Options{})
	ctx := context.Background()
	if err := history(ctx, s); err != nil {
		b.Fatal(err)
	}
	claim := func() ([]leasework.Ref, error) {
		cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: batch, Lease: 30 * time.Second})
		refs := make([]leasework.Ref, len(cs))
		for i, c := range cs {
			refs[i] = c.Ref()
		}
		return refs, err
	}
	if stmt == "lab-or-pkey-only" {
		for _, idx := range []string{"events_queue_ready_idx", "events_queue_lease_idx"} {
			if _, err := s.DB().ExecContext(ctx, "DROP INDEX "+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(idx)); err != nil {
				b.Fatal(err)
			}
		}
		q := fmt.Sprintf(labClaimSQL, s.QualifiedTable())
		claim = func() ([]leasework.Ref, error) {
			rows, err := s.DB().QueryContext(ctx, q, batch)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var refs []leasework.Ref
			for rows.Next() {
				var r leasework.Ref
				if err := rows.Scan(&r.ID, &r.Generation); err != nil {
					return nil, err
				}
				refs = append(refs, r)
			}
			return refs, rows.Err()
		}
	}
	backlog := 0
	for b.Loop() {
		if backlog < batch {
			b.StopTimer()
			backlog += len(pgtest.EnqueueN(b, s, 10_000, "k"))
			// Fresh statistics, as autovacuum would soon give them:
			// planned against an empty table's, the claim would scan
			// the whole table.
			if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		refs, err := claim()
		if err != nil || len(refs) != batch {
			b.Fatalf("claim = %d rows, %v", len(refs), err)
		}
		backlog -= len(refs)
		b.StopTimer()
		if _, err := s.WriteMany(ctx, writesFor(refs, lease.Complete)...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
