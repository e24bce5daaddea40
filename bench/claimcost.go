package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

func init() { addSection("claimcost", claimCost) }

// claimCostBatch is the rows one claim asks for.
const claimCostBatch = 100

// claimCostReady is the claimable backlog kept behind the finished rows.
const claimCostReady = 10_000

// singleORClaimSQL is the lab article's claim, batched: one OR over the two
// kinds of claimable rows, in id order, and the update of the rows it picked
// in the same statement, as the article writes it. It runs on leasework's
// table and indexes; only the statement differs.
const singleORClaimSQL = `
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
RETURNING o.id, o.event_id, o.generation`

// claimCost measures one claim of 100 rows as the table's finished history
// grows: leasework's claim beside the single-OR claim, on the same table.
// Every claim runs in a transaction that is rolled back, so each one sees
// the same table. One table grows from size to size (finished rows are only
// added), and the claimable rows are inserted again after each fill, so
// that they always sit behind the whole history in id order, as they do in
// a table that has run for a while.
func claimCost(ctx context.Context, e *env) ([]table, error) {
	sizes := []int{0, 1_000_000, 5_000_000}
	if e.quick {
		sizes = []int{0, 10_000, 50_000}
	}
	const (
		runs    = 30               // claims of each statement per size
		warmUps = 3                // unmeasured leasework claims per size; the single-OR claim gets one, as it may be slow
		minRuns = 5                // even when a statement is slow
		budget  = 40 * time.Second // per statement and size, past minRuns
	)
	s, err := openLeaseStore(ctx, e, "pgx", freshSchema("claimcost"))
	if err != nil {
		return nil, err
	}
	defer dropLeaseStore(s)
	orSQL := fmt.Sprintf(singleORClaimSQL, s.QualifiedTable())

	t := table{
		title:  "Claim of 100 rows against finished history (median; each claim rolled back)",
		header: []string{"finished rows", "leasework claim", "single-OR claim", "single-OR ÷ leasework"},
	}
	var fills []string
	filled := 0
	for _, size := range sizes {
		began := time.Now()
		if err := growFinished(ctx, e, s, filled, size); err != nil {
			return nil, err
		}
		filled = size
		if err := refillReady(ctx, s); err != nil {
			return nil, err
		}
		fills = append(fills, fmt.Sprintf("%s in %.1fs", thousands(float64(size)), time.Since(began).Seconds()))

		lwClaim := func(tx *sql.Tx) (int, error) {
			cs, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: claimCostBatch, Lease: 30 * time.Second})
			return len(cs), err
		}
		orClaim := func(tx *sql.Tx) (int, error) {
			return countRows(tx.QueryContext(ctx, orSQL, claimCostBatch))
		}
		// Unmeasured first runs: a new connection, the statement's first
		// preparation and plans, the table's pages read into the cache.
		for range warmUps {
			if _, err := rolledBackClaim(ctx, s, lwClaim); err != nil {
				return nil, fmt.Errorf("leasework claim at %d finished rows: %w", size, err)
			}
		}
		if _, err := rolledBackClaim(ctx, s, orClaim); err != nil {
			return nil, fmt.Errorf("single-OR claim at %d finished rows: %w", size, err)
		}
		var lw, or []float64
		var lwTime, orTime time.Duration
		for range runs {
			// Interleaved, so that the machine's load falls on both alike;
			// a statement past its time budget stops once it has minRuns.
			if len(lw) < minRuns || lwTime < budget {
				d, err := rolledBackClaim(ctx, s, lwClaim)
				if err != nil {
					return nil, fmt.Errorf("leasework claim at %d finished rows: %w", size, err)
				}
				lw, lwTime = append(lw, msOf(d)), lwTime+d
			}
			if len(or) < minRuns || orTime < budget {
				d, err := rolledBackClaim(ctx, s, orClaim)
				if err != nil {
					return nil, fmt.Errorf("single-OR claim at %d finished rows: %w", size, err)
				}
				or, orTime = append(or, msOf(d)), orTime+d
			}
		}
		e.logf("claimcost: %s finished rows: leasework %.2f ms, single-OR %.2f ms (%d/%d runs)",
			thousands(float64(size)), median(lw), median(or), len(lw), len(or))
		ratio := "n/a (leasework's claim took 0 ms)"
		if median(lw) > 0 {
			ratio = fmt.Sprintf("%.1f×", median(or)/median(lw))
		}
		orCell := fmt.Sprintf("%.2f ms", median(or))
		if len(or) < runs {
			orCell += fmt.Sprintf(" (%d runs)", len(or))
		}
		t.rows = append(t.rows, []string{thousands(float64(size)), fmt.Sprintf("%.2f ms", median(lw)), orCell, ratio})
	}
	t.notes = append(t.notes,
		fmt.Sprintf("One table, driver pgx; %s READY rows behind the DONE rows in id order; median of %d claims per statement and size after %d unmeasured ones (1 for single-OR) (fewer where a cell says so: a statement stops after %v), the two statements alternating.",
			thousands(claimCostReady), runs, warmUps, budget),
		"leasework claim: lease.Store.ClaimTx (Limit 100, Lease 30s) in a transaction rolled back after the rows are read. single-OR claim: the lab article's statement batched to 100 — WHERE (READY AND due) OR (INPROGRESS AND expired) ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED, then the update in the same statement — on the same table and indexes, also rolled back. Time is the statement and the reading of its rows.",
		"Rows built with INSERT … SELECT generate_series, then VACUUM ANALYZE; the same table grew from size to size, the READY rows inserted again after each fill. Fill times: "+strings.Join(fills, ", ")+".",
	)
	return []table{t}, nil
}

// growFinished adds DONE rows to s's table until it holds size of them (it
// holds from), in statements of a million rows.
func growFinished(ctx context.Context, e *env, s *lease.Store, from, size int) error {
	const chunk = 1_000_000
	for lo := from; lo < size; lo += chunk {
		hi := min(lo+chunk, size)
		_, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+`
			(event_id, kind, status, generation, attempt, finished_at)
			SELECT 'history-' || g, 'history', 'DONE', 1, 1, statement_timestamp()
			FROM generate_series($1::bigint, $2::bigint) AS g`, lo+1, hi)
		if err != nil {
			return fmt.Errorf("insert finished rows: %w", err)
		}
		e.logf("claimcost: %s finished rows", thousands(float64(hi)))
	}
	return nil
}

// refillReady replaces the table's READY rows by claimCostReady new ones,
// whose ids follow every row already there, then vacuums and analyzes the
// table: fresh statistics, as autovacuum would soon give them.
func refillReady(ctx context.Context, s *lease.Store) error {
	q := s.QualifiedTable()
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM `+q+` WHERE status = 'READY'`); err != nil {
		return fmt.Errorf("delete READY rows: %w", err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+q+` (event_id, kind)
		SELECT 'ready-' || gen_random_uuid(), 'k' FROM generate_series(1, $1::int)`, claimCostReady); err != nil {
		return fmt.Errorf("insert READY rows: %w", err)
	}
	if _, err := s.DB().ExecContext(ctx, `VACUUM ANALYZE `+q); err != nil {
		return fmt.Errorf("vacuum analyze: %w", err)
	}
	return nil
}

// rolledBackClaim runs claim in a transaction that it then rolls back, and
// returns how long claim took. The claim must return claimCostBatch rows.
func rolledBackClaim(ctx context.Context, s *lease.Store, claim func(*sql.Tx) (int, error)) (time.Duration, error) {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	began := time.Now()
	n, err := claim(tx)
	d := time.Since(began)
	if err != nil {
		return 0, err
	}
	if n != claimCostBatch {
		return 0, fmt.Errorf("claimed %d rows, want %d", n, claimCostBatch)
	}
	return d, tx.Rollback()
}

// countRows reads and counts the rows of a query.
func countRows(rows *sql.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
