package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasework/leasework/lease"
)

func init() { addSection("partitions", partitions) }

// partitions measures a claim of 100 rows beside a backlog held back by
// partition limits: with no partition limit, with a default limit of 1
// and no backlog, and with 10,000 partitions held at that limit and
// 1,000,000 rows set aside behind them. Two claims each time: of rows of
// no partition, and of rows of partitions with room (each row its own
// partition, whose slot the claim locks and counts in). Every claim runs
// in a transaction that is rolled back, so each sees the same table.
func partitions(ctx context.Context, e *env) ([]table, error) {
	full, behind, free := 10_000, 100, 10_000
	if e.quick {
		full, behind, free = 1_000, 10, 1_000
	}
	const (
		runs    = 30
		warmUps = 3
	)
	s, err := openLeaseStore(ctx, e, "pgx", freshSchema("partitions"))
	if err != nil {
		return nil, err
	}
	defer dropLeaseStore(s)
	q := s.QualifiedTable()
	slots := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_partition_slots")
	exec := func(what, stmt string, args ...any) error {
		if _, err := s.DB().ExecContext(ctx, stmt, args...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	// The claimable rows: free of no partition (kind plain), free each in a
	// partition of its own (kind part), with its slot made, counting none.
	if err := exec("insert the rows of no partition", `INSERT INTO `+q+` (event_id, kind)
		SELECT 'plain-' || g, 'plain' FROM generate_series(1, $1::int) AS g`, free); err != nil {
		return nil, err
	}
	if err := exec("insert the rows of partitions with room", `INSERT INTO `+q+` (event_id, kind, partition_key)
		SELECT 'part-' || g, 'part', 'room-' || g FROM generate_series(1, $1::int) AS g`, free); err != nil {
		return nil, err
	}
	if err := exec("make their slots", `INSERT INTO `+slots+` (partition) SELECT 'room-' || g FROM generate_series(1, $1::int) AS g`, free); err != nil {
		return nil, err
	}
	if err := exec("vacuum", `VACUUM ANALYZE `+q); err != nil {
		return nil, err
	}

	claim := func(kind string) func(*sql.Tx) (int, error) {
		return func(tx *sql.Tx) (int, error) {
			cs, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: claimCostBatch, Lease: 30 * time.Second, Kinds: []string{kind}})
			return len(cs), err
		}
	}
	measure := func(state string) (plain, part float64, err error) {
		for range warmUps {
			for _, k := range []string{"plain", "part"} {
				if _, err := rolledBackClaim(ctx, s, claim(k)); err != nil {
					return 0, 0, fmt.Errorf("%s: claim of %s rows: %w", state, k, err)
				}
			}
		}
		var a, b []float64
		for range runs {
			d, err := rolledBackClaim(ctx, s, claim("plain"))
			if err != nil {
				return 0, 0, fmt.Errorf("%s: claim of plain rows: %w", state, err)
			}
			a = append(a, msOf(d))
			d, err = rolledBackClaim(ctx, s, claim("part"))
			if err != nil {
				return 0, 0, fmt.Errorf("%s: claim of part rows: %w", state, err)
			}
			b = append(b, msOf(d))
		}
		e.logf("partitions: %s: plain %.2f ms, part %.2f ms", state, median(a), median(b))
		return median(a), median(b), nil
	}

	t := table{
		title:  "Claim of 100 rows beside partitions held at their limit (median; each claim rolled back)",
		header: []string{"state", "rows of no partition", "rows of partitions with room"},
	}
	add := func(state string, plain, part float64) {
		t.rows = append(t.rows, []string{state, fmt.Sprintf("%.2f ms", plain), fmt.Sprintf("%.2f ms", part)})
	}
	noLimitA, noLimitB, err := measure("no partition limit")
	if err != nil {
		return nil, err
	}
	add("no partition limit declared", noLimitA, noLimitB)
	if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Max: 1}, "bench"); err != nil {
		return nil, err
	}
	emptyA, emptyB, err := measure("default limit 1, no backlog")
	if err != nil {
		return nil, err
	}
	add("default limit of 1, no backlog", emptyA, emptyB)

	began := time.Now()
	if err := exec("make the full partitions' slots", `INSERT INTO `+slots+` (partition, used)
		SELECT 'full-' || g, 1 FROM generate_series(1, $1::int) AS g`, full); err != nil {
		return nil, err
	}
	if err := exec("insert their holders", `INSERT INTO `+q+`
		(event_id, kind, partition_key, partition_slot, status, generation, attempt, lease_until)
		SELECT 'holder-' || s.partition, 'holder', s.partition, s.id, 'INPROGRESS', 1, 1, statement_timestamp() + interval '1 hour'
		FROM `+slots+` AS s WHERE s.partition LIKE 'full-%'`); err != nil {
		return nil, err
	}
	for lo := 0; lo < full*behind; lo += 1_000_000 {
		hi := min(lo+1_000_000, full*behind)
		if err := exec("insert the rows set aside", `INSERT INTO `+q+` (event_id, kind, partition_key, status)
			SELECT 'aside-' || g, 'part', 'full-' || (g % $3::int + 1), 'WAITING'
			FROM generate_series($1::int, $2::int) AS g`, lo+1, hi, full); err != nil {
			return nil, err
		}
	}
	if err := exec("vacuum", `VACUUM ANALYZE `+q); err != nil {
		return nil, err
	}
	setup := time.Since(began)
	fullA, fullB, err := measure("full partitions")
	if err != nil {
		return nil, err
	}
	add(fmt.Sprintf("%s partitions full, %s rows set aside", thousands(float64(full)), thousands(float64(full*behind))), fullA, fullB)
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	t.rows = append(t.rows,
		[]string{"backlog ÷ no backlog", ratio(fullA, emptyA), ratio(fullB, emptyB)},
		[]string{"limit ÷ no limit (no backlog)", ratio(emptyA, noLimitA), ratio(emptyB, noLimitB)})
	t.notes = append(t.notes,
		fmt.Sprintf("One table, driver pgx; %s READY rows of no partition (kind plain) and %s READY rows each of a partition of its own whose slot exists (kind part); a claim of Limit 100 of one kind, median of %d per kind and state after %d unmeasured ones, the two kinds alternating.",
			thousands(float64(free)), thousands(float64(free)), runs, warmUps),
		fmt.Sprintf("The backlog: %s partitions, each with one holder INPROGRESS under a 1-hour lease counted in its slot (used 1 of 1) and %d rows set aside (WAITING, kind part), inserted by SQL in %.1fs, then VACUUM ANALYZE. A claim of kind part reads none of them: it takes rows of partitions with room, locking and counting in 100 slots.",
			thousands(float64(full)), behind, setup.Seconds()),
	)
	return []table{t}, nil
}
