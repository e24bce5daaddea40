package main

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leasework/leasework/lease"
)

func init() { addSection("partitions", partitions) }

// partitionState is one store of the partitions section: the claimable
// rows alike in each, the partition limits and the backlog not.
type partitionState struct {
	name  string
	s     *lease.Store
	plain [][]float64 // ms of each measured claim of queue plain, by batch (partitionBatches)
	part  [][]float64 // and of queue part
}

// partitionBatches are the Limits of the partitions section's claims: the
// claimcost section's, and ten times it, where a step that costs the
// square of the batch would show.
var partitionBatches = []int{claimCostBatch, 10 * claimCostBatch}

// partitions measures a claim of 100 rows, and one of 1,000, beside a
// backlog held back by partition limits, in three stores measured in
// interleaved rounds: with no partition limit, with a default limit of 1
// and no backlog, and with 10,000 partitions held at that limit and
// 1,000,000 rows set aside behind them. Two claims of each Limit in
// each: of queue plain, whose rows have no
// partition, and of queue part, whose rows are each of a partition of its
// own with room (the claim locks and counts in their slots), beside the
// rows set aside, which are of queue part too. The stores without the
// backlog hold as many finished rows in its place: every table is of one
// size. Every claim runs in a transaction that is rolled back, so each
// sees the same tables.
func partitions(ctx context.Context, e *env) ([]table, error) {
	full, behind, free := 10_000, 100, 10_000
	if e.quick {
		full, behind, free = 1_000, 10, 1_000
	}
	// Measured rounds come in blocks, each after the small tables are
	// vacuumed and a few unmeasured rounds: a vacuum invalidates the
	// server's cached plans of the claim, and the next executions plan it
	// again (custom plans first: milliseconds of planning each).
	const (
		blocks   = 3
		perBlock = 10
		warmUps  = 3
		runs     = blocks * perBlock
	)
	states := []*partitionState{{name: "no partition limit"}, {name: "default limit 1, no backlog"}, {name: "full partitions"}}
	for _, st := range states {
		s, err := openLeaseStore(ctx, e, "pgx", freshSchema("partitions"))
		if err != nil {
			return nil, err
		}
		defer dropLeaseStore(s)
		st.s = s
		st.plain = make([][]float64, len(partitionBatches))
		st.part = make([][]float64, len(partitionBatches))
	}
	var setup time.Duration
	for i, st := range states {
		began := time.Now()
		if err := setUpPartitionState(ctx, st.s, i > 0, i == 2, free, full, behind, full+full*behind); err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		if i == 2 {
			setup = time.Since(began)
		}
	}

	claim := func(s *lease.Store, queue string, limit int) func(*sql.Tx) (int, error) {
		return func(tx *sql.Tx) (int, error) {
			cs, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: limit, Lease: 30 * time.Second, Queue: queue})
			return len(cs), err
		}
	}
	for round := range blocks * (warmUps + perBlock) {
		if round%(warmUps+perBlock) == 0 {
			for _, st := range states {
				if err := vacuumPartitionTables(ctx, st.s); err != nil {
					return nil, fmt.Errorf("%s: %w", st.name, err)
				}
			}
		}
		measured := round%(warmUps+perBlock) >= warmUps
		// Each round starts at another state, and alternates the queues.
		for i := range states {
			st := states[(round+i)%len(states)]
			queues := []string{"plain", "part"}
			if round%2 == 1 {
				queues = []string{"part", "plain"}
			}
			for b, limit := range partitionBatches {
				for _, q := range queues {
					d, err := rolledBackClaimOf(ctx, st.s, limit, claim(st.s, q, limit))
					if err != nil {
						return nil, fmt.Errorf("%s: claim of %d of queue %s: %w", st.name, limit, q, err)
					}
					if !measured {
						continue
					}
					if q == "plain" {
						st.plain[b] = append(st.plain[b], msOf(d))
					} else {
						st.part[b] = append(st.part[b], msOf(d))
					}
				}
			}
		}
	}

	cell := func(xs []float64) string {
		lo, hi := quartiles(xs)
		return fmt.Sprintf("%.2f ms (%.2f–%.2f)", median(xs), lo, hi)
	}
	labels := []string{"no partition limit declared", "default limit of 1, no backlog",
		fmt.Sprintf("%s partitions full, %s rows set aside", thousands(float64(full)), thousands(float64(full*behind)))}
	// ratio is the ratio of the medians, then the median and the middle
	// half of the ratios of the claims of one round: the claims of a
	// round ran moments apart, under the same load.
	ratio := func(a, b []float64) string {
		if median(b) == 0 || len(a) != len(b) {
			return "n/a"
		}
		var paired []float64
		for i := range a {
			if b[i] > 0 {
				paired = append(paired, a[i]/b[i])
			}
		}
		lo, hi := quartiles(paired)
		return fmt.Sprintf("%.2f× (by round %.2f×, %.2f–%.2f)", median(a)/median(b), median(paired), lo, hi)
	}
	none, empty, backlog := states[0], states[1], states[2]
	var ts []table
	for b, limit := range partitionBatches {
		t := table{
			title:  fmt.Sprintf("Claim of %s rows beside partitions held at their limit (median, and the middle half of the claims; each claim rolled back)", thousands(float64(limit))),
			header: []string{"state", "rows of no partition", "rows of partitions with room"},
		}
		for i, st := range states {
			e.logf("partitions: claim of %d: %s: plain %.2f ms, part %.2f ms", limit, st.name, median(st.plain[b]), median(st.part[b]))
			t.rows = append(t.rows, []string{labels[i], cell(st.plain[b]), cell(st.part[b])})
		}
		t.rows = append(t.rows,
			[]string{"backlog ÷ no backlog", ratio(backlog.plain[b], empty.plain[b]), ratio(backlog.part[b], empty.part[b])},
			[]string{"limit ÷ no limit (no backlog)", ratio(empty.plain[b], none.plain[b]), ratio(empty.part[b], none.part[b])})
		ts = append(ts, t)
	}
	t := &ts[len(ts)-1]
	t.notes = append(t.notes,
		fmt.Sprintf("Three stores (schemas), driver pgx, each with %s READY rows of queue plain, of no partition, and %s READY rows of queue part, each of a partition of its own; in the stores with the default limit, each of those partitions has a slot with room (used 0 of 1). A claim of Limit 100, or 1,000, of one queue; %d rounds, each one claim of each Limit of each queue in each store, starting at another store each round, so that the machine's load falls on every state alike; the median and the middle half of the %d claims of each. A ratio is of the medians, then (by round) the median and the middle half of the ratios of the two claims of each round.",
			thousands(float64(free)), thousands(float64(free)), runs, runs),
		fmt.Sprintf("The backlog: %s partitions, each with one holder INPROGRESS under a 1-hour lease counted in its slot (used 1 of 1) and %d rows set aside (WAITING, queue part), inserted by SQL in %.1fs, then VACUUM ANALYZE. A claim of queue part reads none of them: it takes rows of partitions with room, locking and counting in their slots (100, or 1,000).",
			thousands(float64(full)), behind, setup.Seconds()),
		fmt.Sprintf("The stores without the backlog hold as many rows finished (%s DONE rows of queue part) in its place, so that the planner sees tables of one size in every store and the figures compare the backlog, not the table's size: in a table of %s rows, the generic plan of the claim read its queue's range of the READY index by a bitmap scan, every READY row of the queue, and sorted them, where the larger table's reads the index in order. What a table's finished history costs a claim is the claimcost section's.",
			thousands(float64(full+full*behind)), thousands(float64(2*free))),
		fmt.Sprintf("No place given back or look again is pending in any store: the limit is declared before the slots are made. SetLimit of a default writes a look-again release for every slot that exists, which claims that commit consume, 64 slots a claim; a claim rolled back leaves them, and every later claim would count the same 64 again (and update and roll back the same slots), which is not what a running system's claims do. The slots and releases tables of every store are vacuumed every %d rounds, so that the dead versions the rolled-back claims leave there do not pile up, each time followed by %d unmeasured rounds (a vacuum makes the server plan the claim again).", perBlock, warmUps),
	)
	return ts, nil
}

// rolledBackClaimOf runs claim in a transaction that it rolls back, and
// returns how long claim took; claim must return want rows.
func rolledBackClaimOf(ctx context.Context, s *lease.Store, want int, claim func(*sql.Tx) (int, error)) (time.Duration, error) {
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
	if n != want {
		return 0, fmt.Errorf("claimed %d rows, want %d", n, want)
	}
	return d, tx.Rollback()
}

// setUpPartitionState fills the store of one state: the claimable rows of
// queues plain and part; with limited, the default partition limit of 1,
// then a slot with room for each of the part rows' partitions; with
// backlog, full partitions each with a holder and behind rows set aside,
// else as many rows (pad) finished, DONE.
func setUpPartitionState(ctx context.Context, s *lease.Store, limited, backlog bool, free, full, behind, pad int) error {
	q := s.QualifiedTable()
	slots := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_partition_slots")
	releases := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_partition_releases")
	exec := func(what, stmt string, args ...any) error {
		if _, err := s.DB().ExecContext(ctx, stmt, args...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := exec("insert the rows of no partition", `INSERT INTO `+q+` (event_id, kind, queue)
		SELECT 'plain-' || g, 'k', 'plain' FROM generate_series(1, $1::int) AS g`, free); err != nil {
		return err
	}
	if err := exec("insert the rows of partitions with room", `INSERT INTO `+q+` (event_id, kind, queue, partition_key)
		SELECT 'part-' || g, 'k', 'part', 'room-' || g FROM generate_series(1, $1::int) AS g`, free); err != nil {
		return err
	}
	if limited {
		// Declared before any slot exists: it writes no look-again
		// release.
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Max: 1}, "bench"); err != nil {
			return err
		}
		if err := exec("make their slots", `INSERT INTO `+slots+` (partition)
			SELECT 'room-' || g FROM generate_series(1, $1::int) AS g`, free); err != nil {
			return err
		}
	}
	if !backlog {
		if err := exec("insert the finished rows", `INSERT INTO `+q+` (event_id, kind, queue, status, generation, attempt, finished_at)
			SELECT 'done-' || g, 'k', 'part', 'DONE', 1, 1, statement_timestamp() FROM generate_series(1, $1::int) AS g`, pad); err != nil {
			return err
		}
	}
	if backlog {
		if err := exec("make the full partitions' slots", `INSERT INTO `+slots+` (partition, used)
			SELECT 'full-' || g, 1 FROM generate_series(1, $1::int) AS g`, full); err != nil {
			return err
		}
		if err := exec("insert their holders", `INSERT INTO `+q+`
			(event_id, kind, queue, partition_key, partition_slot, status, generation, attempt, lease_until)
			SELECT 'holder-' || s.partition, 'k', 'part', s.partition, s.id, 'INPROGRESS', 1, 1, statement_timestamp() + interval '1 hour'
			FROM `+slots+` AS s WHERE s.partition LIKE 'full-%'`); err != nil {
			return err
		}
		for lo := 0; lo < full*behind; lo += 1_000_000 {
			hi := min(lo+1_000_000, full*behind)
			if err := exec("insert the rows set aside", `INSERT INTO `+q+` (event_id, kind, queue, partition_key, status)
				SELECT 'aside-' || g, 'k', 'part', 'full-' || (g % $3::int + 1), 'WAITING'
				FROM generate_series($1::int, $2::int) AS g`, lo+1, hi, full); err != nil {
				return err
			}
		}
	}
	if err := exec("vacuum", `VACUUM ANALYZE `+q); err != nil {
		return err
	}
	if err := exec("vacuum", `VACUUM ANALYZE `+slots+`, `+releases); err != nil {
		return err
	}
	var pending int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+releases).Scan(&pending); err != nil {
		return err
	}
	if pending != 0 {
		return fmt.Errorf("%d partition releases pending before the measurement; want none", pending)
	}
	return nil
}

// vacuumPartitionTables vacuums the partition limits' slots and releases
// of s.
func vacuumPartitionTables(ctx context.Context, s *lease.Store) error {
	schema := lease.QuoteIdent(s.Schema()) + "."
	_, err := s.DB().ExecContext(ctx, `VACUUM `+schema+lease.QuoteIdent(s.Table()+"_partition_slots")+`, `+
		schema+lease.QuoteIdent(s.Table()+"_partition_releases"))
	return err
}

// quartiles returns the first and third quartiles of xs (nearest rank).
func quartiles(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	return rank(0.25), rank(0.75)
}
