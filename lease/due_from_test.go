package lease_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestClaimDueFromStartsEachLevelAtItsFloor checks ClaimRequest.DueFrom:
// a level's rows due before its floor are not claimed, a zero floor and a
// level past the slice's end read from the oldest, and a claim without
// floors takes what the floored one left.
func TestClaimDueFromStartsEachLevelAtItsFloor(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	var now time.Time
	if err := s.DB().QueryRowContext(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	pgtest.Enqueue(t, s,
		lease.Event{Kind: "k", EventID: "p0-old", RunAt: ago(time.Minute)},
		lease.Event{Kind: "k", EventID: "p0-new", RunAt: ago(10 * time.Second)},
		lease.Event{Kind: "k", EventID: "p1-old", Priority: 1, RunAt: ago(time.Minute)},
		lease.Event{Kind: "k", EventID: "p1-new", Priority: 1, RunAt: ago(10 * time.Second)},
		lease.Event{Kind: "k", EventID: "p2-old", Priority: 2, RunAt: ago(time.Minute)},
	)
	claimed := func(req lease.ClaimRequest) []string {
		t.Helper()
		got, err := s.Claim(ctx, req)
		if err != nil {
			t.Fatalf("Claim(%+v): %v", req, err)
		}
		var ids []string
		for _, c := range got {
			ids = append(ids, c.EventID)
		}
		slices.Sort(ids)
		return ids
	}
	// Level 0 floored, level 1 not (zero), level 2 past the slice's end.
	got := claimed(lease.ClaimRequest{Limit: 10, Lease: time.Minute, DueFrom: []time.Time{ago(30 * time.Second), {}}})
	if want := []string{"p0-new", "p1-new", "p1-old", "p2-old"}; !slices.Equal(got, want) {
		t.Fatalf("claim with level 0's floor 30s ago took %v; want %v (p0-old came due before the floor)", got, want)
	}
	if got := claimed(lease.ClaimRequest{Limit: 10, Lease: time.Minute, DueFrom: []time.Time{ago(30 * time.Second)}}); len(got) != 0 {
		t.Fatalf("a second floored claim took %v; want nothing", got)
	}
	if got := claimed(lease.ClaimRequest{Limit: 10, Lease: time.Minute}); !slices.Equal(got, []string{"p0-old"}) {
		t.Fatalf("a claim without floors took %v; want [p0-old]", got)
	}
	tooMany := make([]time.Time, lease.MaxPriority+2)
	if _, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, DueFrom: tooMany}); err == nil || !strings.Contains(err.Error(), "DueFrom") {
		t.Fatalf("Claim with %d floors: %v; want an error naming DueFrom", len(tooMany), err)
	}
}

var readyScanBuffers = regexp.MustCompile(`Index Scan using events_queue_ready_idx[^\n]*\n(?:[^\n]*\n)*?\s*Buffers: shared hit=(\d+)(?: read=(\d+))?`)

// TestClaimDueFromSkipsEntriesVacuumCannotRemove builds what a pinned
// xmin horizon leaves in the ready index: while a transaction holding an
// xid stays open, 5,000 rows are claimed and finished, and their entries
// stay ahead of the 10 rows still READY. The claim without floors reads
// them all; with its floor after them it reads a few pages.
func TestClaimDueFromSkipsEntriesVacuumCannotRemove(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	now := pinHorizon(t, s)
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind, next_attempt_at)
		SELECT 'old-' || i, 'k', $1::timestamptz + i * interval '1 millisecond' FROM generate_series(1, 5000) AS i`, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET status = 'DONE', finished_at = statement_timestamp()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "VACUUM "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	pgtest.EnqueueN(t, s, 10, "k")
	full := scanBuffers(t, s, readyScanBuffers, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	floored := scanBuffers(t, s, readyScanBuffers, lease.ClaimRequest{Limit: 10, Lease: time.Minute, DueFrom: []time.Time{now.Add(-time.Minute)}})
	t.Logf("ready index scan behind 5,000 entries vacuum cannot remove: %d buffers from the oldest, %d from the floor", full, floored)
	if full < 50 || floored*5 > full {
		t.Fatalf("the ready index scan read %d buffers from the oldest and %d from a floor after the finished rows; want the floor to read under a fifth", full, floored)
	}
}

// TestClaimExpiredFromStartsAtTheLeaseFloor checks
// ClaimRequest.ExpiredFrom: a lease that ran out before the floor is not
// claimed, one that ran out after it is, and a claim without the floor
// takes what the floored one left.
func TestClaimExpiredFromStartsAtTheLeaseFloor(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	in := pgtest.EnqueueN(t, s, 2, "k")
	if got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute}); err != nil || len(got) != 2 {
		t.Fatalf("claim of the 2 rows: %d claims, %v", len(got), err)
	}
	var now time.Time
	if err := s.DB().QueryRowContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET lease_until = statement_timestamp() - CASE WHEN id = $1 THEN interval '1 hour' ELSE interval '10 seconds' END
		RETURNING statement_timestamp()`, in[0].ID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	reclaimed := func(req lease.ClaimRequest) []int64 {
		t.Helper()
		got, err := s.Claim(ctx, req)
		if err != nil {
			t.Fatalf("Claim(%+v): %v", req, err)
		}
		var ids []int64
		for _, c := range got {
			if !c.Reclaimed {
				t.Fatalf("claim took row %d, READY; only expired leases were left", c.ID)
			}
			ids = append(ids, c.ID)
		}
		return ids
	}
	floor := lease.ClaimRequest{Limit: 10, Lease: time.Minute, ExpiredFrom: now.Add(-time.Minute)}
	if got := reclaimed(floor); !slices.Equal(got, []int64{in[1].ID}) {
		t.Fatalf("claim with the lease floor a minute ago took %v; want [%d] (row %d's lease ran out an hour ago)", got, in[1].ID, in[0].ID)
	}
	if got := reclaimed(floor); len(got) != 0 {
		t.Fatalf("a second floored claim took %v; want nothing", got)
	}
	if got := reclaimed(lease.ClaimRequest{Limit: 10, Lease: time.Minute}); !slices.Equal(got, []int64{in[0].ID}) {
		t.Fatalf("a claim without the lease floor took %v; want [%d]", got, in[0].ID)
	}
}

var leaseScanBuffers = regexp.MustCompile(`Index Scan using events_queue_lease_idx[^\n]*\n(?:[^\n]*\n)*?\s*Buffers: shared hit=(\d+)(?: read=(\d+))?`)

// TestClaimExpiredFromSkipsEntriesVacuumCannotRemove builds what a pinned
// xmin horizon leaves in the lease index: while a transaction holding an
// xid stays open, 5,000 rows are claimed (their leases already run out)
// and finished, and their entries stay where the claim looks for expired
// leases. The claim without the lease floor reads them all; with the
// floor after them it reads a few pages.
func TestClaimExpiredFromSkipsEntriesVacuumCannotRemove(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	now := pinHorizon(t, s)
	finishBehindHorizon(t, s, now.Add(-time.Hour))
	pgtest.EnqueueN(t, s, 10, "k")
	full := scanBuffers(t, s, leaseScanBuffers, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	floored := scanBuffers(t, s, leaseScanBuffers, lease.ClaimRequest{Limit: 10, Lease: time.Minute, ExpiredFrom: now.Add(-time.Minute)})
	t.Logf("lease index scan behind 5,000 entries vacuum cannot remove: %d buffers from the oldest, %d from the floor", full, floored)
	if full < 50 || floored*5 > full {
		t.Fatalf("the lease index scan read %d buffers from the oldest and %d from a floor after the finished rows; want the floor to read under a fifth", full, floored)
	}
}

// finishBehindHorizon inserts 5,000 rows claimed with leases that end a
// millisecond apart from leasesFrom on, finishes them, and vacuums the
// table: with the horizon pinned (pinHorizon), their entries stay in the
// lease index.
func finishBehindHorizon(t *testing.T, s *lease.Store, leasesFrom time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO ` + s.QualifiedTable() + ` (event_id, kind, status, generation, attempt, lease_until)
		SELECT 'old-' || i, 'k', 'INPROGRESS', 1, 1, $1::timestamptz + i * interval '1 millisecond' FROM generate_series(1, 5000) AS i`,
		`UPDATE ` + s.QualifiedTable() + ` SET status = 'DONE', lease_until = NULL, finished_at = statement_timestamp()`,
		`VACUUM ` + s.QualifiedTable(),
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, leasesFrom)
		}
		if _, err := s.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
}

// pinHorizon opens a transaction that holds an xid until the test ends,
// pinning the xmin horizon: vacuum removes nothing written after it. It
// returns the database clock.
func pinHorizon(t *testing.T, s *lease.Store) time.Time {
	t.Helper()
	ctx := context.Background()
	pin, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pin.Rollback() })
	if _, err := pin.ExecContext(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := s.DB().QueryRowContext(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// scanBuffers returns the buffers that the index scan matched by scan
// read in the plan of a claim of req, which must claim 10 rows.
func scanBuffers(t *testing.T, s *lease.Store, scan *regexp.Regexp, req lease.ClaimRequest) int {
	t.Helper()
	plan, err := s.ExplainClaim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := scan.FindStringSubmatch(plan)
	if m == nil || !strings.Contains(plan, "rows=10 loops=1") {
		t.Fatalf("claim plan (floors %v, lease floor %v) shows no buffers of the index scan, or does not claim 10 rows:\n%s", req.DueFrom, req.ExpiredFrom, plan)
	}
	hit, _ := strconv.Atoi(m[1])
	read, _ := strconv.Atoi(m[2])
	return hit + read
}

// TestClaimExpiredFromLeavesOlderLeasesToTheSweep checks what a claim
// with a lease floor leaves to a claim without one: an expired lease on
// its last attempt that ran out before the floor (ended FAILED by the
// claim without the floor), and a row cancelled while it ran whose lease
// ran out, whenever that was (ended DISCARDED by it).
func TestClaimExpiredFromLeavesOlderLeasesToTheSweep(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	in := pgtest.EnqueueN(t, s, 3, "k")
	if got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 3, Lease: time.Minute}); err != nil || len(got) != 3 {
		t.Fatalf("claim of the 3 rows: %d claims, %v", len(got), err)
	}
	// Row 0 spent its last attempt an hour ago, row 1 ten seconds ago;
	// row 2 was cancelled while it ran, and its lease ran out ten seconds ago.
	var now time.Time
	if err := s.DB().QueryRowContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET max_attempts = CASE WHEN id = $3 THEN max_attempts ELSE attempt END,
		    cancelled_at = CASE WHEN id = $3 THEN statement_timestamp() END,
		    lease_until = statement_timestamp() - CASE WHEN id = $1 THEN interval '1 hour' ELSE interval '10 seconds' END
		WHERE id IN ($1, $2, $3)
		RETURNING statement_timestamp()`, in[0].ID, in[1].ID, in[2].ID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	status := func() []leasework.Status {
		var out []leasework.Status
		for _, e := range in {
			row, err := s.Get(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, row.Status)
		}
		return out
	}
	floored := lease.ClaimRequest{Limit: 10, Lease: time.Minute, ExpiredFrom: now.Add(-time.Minute)}
	if got, err := s.Claim(ctx, floored); err != nil || len(got) != 0 {
		t.Fatalf("claim with the lease floor: %d claims, %v; want none", len(got), err)
	}
	want := []leasework.Status{leasework.StatusInProgress, leasework.StatusFailed, leasework.StatusInProgress}
	if got := status(); !slices.Equal(got, want) {
		t.Fatalf("after the claim with the lease floor a minute ago, the rows are %v; want %v", got, want)
	}
	if got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(got) != 0 {
		t.Fatalf("claim without the lease floor: %d claims, %v; want none", len(got), err)
	}
	want = []leasework.Status{leasework.StatusFailed, leasework.StatusFailed, leasework.StatusDiscarded}
	if got := status(); !slices.Equal(got, want) {
		t.Fatalf("after the claim without the lease floor, the rows are %v; want %v", got, want)
	}
}

// leaseIndexBuffers returns the buffers that every scan of the lease
// index read in the plan of a claim of req.
func leaseIndexBuffers(t *testing.T, s *lease.Store, req lease.ClaimRequest) int {
	t.Helper()
	plan, err := s.ExplainClaim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return leaseScansRead(plan)
}

// leaseScansRead sums the buffers that the scans of the lease index read
// in plan.
func leaseScansRead(plan string) (sum int) {
	for _, m := range leaseScanBuffers.FindAllStringSubmatch(strings.ReplaceAll(plan, "Index Only Scan", "Index Scan"), -1) {
		hit, _ := strconv.Atoi(m[1])
		read, _ := strconv.Atoi(m[2])
		sum += hit + read
	}
	return sum
}

// TestClaimExpiredFromReadsNoLeaseRangeFromTheOldest: with the lease
// floor, no part of a claim walks the lease entries a pinned horizon
// leaves behind, whichever index the planner takes. The two small indexes
// the parts for exhausted and cancelled leases are meant to read are
// dropped, as a planner misled by statistics that count no dead entry may
// pass them over for the queue's lease index; behind 5,000 finished rows,
// the claim's scans of that index read under a tenth of the buffers from
// the floor that they read from the oldest.
func TestClaimExpiredFromReadsNoLeaseRangeFromTheOldest(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	for _, idx := range []string{"events_exhausted_idx", "events_stopping_idx"} {
		if _, err := s.DB().ExecContext(ctx, "DROP INDEX "+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(idx)); err != nil {
			t.Fatal(err)
		}
	}
	now := pinHorizon(t, s)
	finishBehindHorizon(t, s, now.Add(-time.Hour))
	if _, err := s.DB().ExecContext(ctx, "ANALYZE "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	pgtest.EnqueueN(t, s, 10, "k")
	full := leaseIndexBuffers(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	floored := leaseIndexBuffers(t, s, lease.ClaimRequest{Limit: 10, Lease: time.Minute, ExpiredFrom: now.Add(-time.Minute)})
	t.Logf("the claim's lease index scans behind 5,000 entries vacuum cannot remove, without the small lease indexes: %d buffers from the oldest, %d from the floor", full, floored)
	if full < 200 || floored*10 > full {
		t.Fatalf("the claim's lease index scans read %d buffers from the oldest and %d from a floor after the finished rows; want the floor to read under a tenth", full, floored)
	}
}

// TestNextWakeFromSkipsEntriesVacuumCannotRemove builds what a pinned
// xmin horizon leaves ahead of now in the lease index: while a
// transaction holding an xid stays open, 5,000 rows are claimed (their
// leases still running) and finished, and one row, claimed after them,
// still runs. NextWakeFrom with no floor walks every entry of the finished
// rows to that lease; from the lease it returned, it reads a few pages
// and finds the same lease; from a floor past it, none.
func TestNextWakeFromSkipsEntriesVacuumCannotRemove(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	now := pinHorizon(t, s)
	finishBehindHorizon(t, s, now.Add(30*time.Minute))
	running := now.Add(time.Hour).Truncate(time.Microsecond)
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind, status, generation, attempt, lease_until)
		VALUES ('running', 'k', 'INPROGRESS', 1, 1, $1)`, running); err != nil {
		t.Fatal(err)
	}
	wake := func(from time.Time) (time.Duration, bool, time.Time) {
		t.Helper()
		d, ok, earliest, err := s.NextWakeFrom(ctx, "", from)
		if err != nil {
			t.Fatal(err)
		}
		return d, ok, earliest
	}
	d, ok, earliest := wake(time.Time{})
	if !ok || !earliest.Equal(running) || d < 59*time.Minute || d > time.Hour {
		t.Fatalf("NextWakeFrom with no floor: %v, %v, lease %v; want about an hour, the running lease %v", d, ok, earliest, running)
	}
	if d, ok, again := wake(earliest); !ok || !again.Equal(running) || d < 59*time.Minute || d > time.Hour {
		t.Fatalf("NextWakeFrom from the lease it found: %v, %v, lease %v; want about an hour, the running lease %v", d, ok, again, running)
	}
	if d, ok, none := wake(running.Add(time.Microsecond)); ok || !none.IsZero() {
		t.Fatalf("NextWakeFrom from past the running lease: %v, %v, lease %v; want nothing", d, ok, none)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := lease.RowStatements(s)["nextWake"]
	buffers := func(from int64) int {
		return leaseScansRead(explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", "force_generic_plan", st, fmt.Sprintf("'default', %d", from)))
	}
	full, floored := buffers(0), buffers(earliest.UnixMicro())
	t.Logf("NextWake's lease index scan behind 5,000 entries vacuum cannot remove: %d buffers from now, %d from the lease it found", full, floored)
	if full < 50 || floored*5 > full {
		t.Fatalf("NextWake's lease index scan read %d buffers from now and %d from the lease it found; want the floor to read under a fifth", full, floored)
	}
}
