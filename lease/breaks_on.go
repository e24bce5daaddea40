//go:build leasework_break

package lease

import (
	"fmt"
	"os"
	"strings"
)

// This file breaks the library on purpose. It is built only with the
// leasework_break tag, never in a normal build: the chaos soak
// (internal/rig/chaos) runs against each break, named by $LEASEWORK_BREAK, to
// show that its history checker catches it.

// breakQueries rewrites the statements for the break $LEASEWORK_BREAK
// names, if it is one of the store's.
func breakQueries(q *queries) {
	switch os.Getenv("LEASEWORK_BREAK") {
	case "steal-leases":
		// The claim takes leases with less than 60% of their time left:
		// a second owner while the first one's lease runs (a renewal
		// every third of a lease keeps the leases of short handlers out
		// of its reach; long ones are taken).
		replaceClaims(q, "AND lease_until <= statement_timestamp()\n      AND attempt < max_attempts",
			"AND lease_until <= statement_timestamp() + 0.6 * $3 * interval '1 microsecond'\n      AND attempt < max_attempts")
	case "claim-waiting":
		// The claim takes WAITING rows as if each were its key's head.
		replaceClaims(q, "AND status = 'READY' AND next_attempt_at <= statement_timestamp()",
			"AND status IN ('READY', 'WAITING') AND next_attempt_at <= statement_timestamp()")
	case "cancel-releases":
		// A cancel of a running attempt ends its row at once, as before
		// the fix of issue 17's item 2: the key passes on while the
		// cancelled handler still runs.
		q.cancel = mustReplace(q.cancel, runningLease, "false")
	case "cancel-finished":
		// Cancel ends DONE rows too.
		q.cancel = mustReplace(q.cancel, "o.status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING')",
			"o.status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING', 'DONE')")
	case "snooze-spends":
		// A snooze does not grow the budget.
		q.retry = mustReplace(q.retry, snoozed, "0")
	case "retry-doubled":
		// A retry waits twice the delay it was given.
		q.retry = mustReplace(q.retry, "->> 1)::bigint * interval '1 microsecond'", "->> 1)::bigint * 2 * interval '1 microsecond'")
	case "pause-ignored":
		// The claim takes rows of a paused queue.
		replaceClaims(q, "NOT (SELECT yes FROM paused)", "true")
	case "limit-off-by-one":
		// The claim admits one attempt more than a limit allows: with
		// every slot held, one row without a slot, which no later claim
		// counts either.
		replaceClaims(q, "SELECT scope, name, n FROM free", "SELECT scope, name, n + 1 AS n FROM free")
	case "limit-handoff-doubled":
		// A completion hands each place its rows held on to two rows.
		for _, q := range []*string{&q.completeTaking, &q.completeDeleteTaking} {
			*q = mustReplace(*q, "SELECT 'queue', d.queue, d.queue_slot, d.id FROM done AS d WHERE d.queue_slot IS NOT NULL) AS x",
				"SELECT 'queue', d.queue, d.queue_slot, d.id FROM done AS d WHERE d.queue_slot IS NOT NULL) AS x CROSS JOIN generate_series(1, 2) AS twice")
		}
	case "partition-off-by-one":
		// The claim admits one attempt more than a partition's room: a
		// full partition takes one more new row at every claim, counted
		// in its slot. (Not an expired row it takes back: past the limit,
		// that one would be counted twice, and the slot's count would
		// stay one too high for good, stranding the partition's rows set
		// aside, which the soak's drain would wait for.)
		replaceClaims(q, "OR r.in_part <= l.room)\n", "OR (NOT r.carry_part AND r.in_part <= l.room + 1) OR r.in_part <= l.room)\n")
	case "rate-window-short":
		// The claim counts a rate limit's starts over half its period:
		// up to twice Max start in some window of the period.
		replaceClaims(q, "l.period_us * interval '1 microsecond' AS period,",
			"l.period_us * interval '1 microsecond' / 2 AS period,")
	case "partition-rate-window-short":
		// The claim counts a partition's rate limit's starts over half
		// its period: up to twice Max start in some window of the period.
		replaceClaims(q, "->> 3)::bigint * interval '1 microsecond' AS period) AS b",
			"->> 3)::bigint * interval '1 microsecond' / 2 AS period) AS b")
	case "fair-no-arrivals":
		// With the insert trigger writing no arrival (breakMigration), a
		// fair queue's claims never learn of a partition from its
		// enqueue, and take no row of a partition they do not know.
		q.claimFair = mustReplace(q.claimFair, "              FROM plain AS p\n              WHERE p.id NOT IN (SELECT id FROM fair_read UNION ALL SELECT id FROM fair_more)) AS p) AS u",
			"              FROM plain AS p\n              WHERE p.id NOT IN (SELECT id FROM fair_read UNION ALL SELECT id FROM fair_more) AND p.partition_key IS NULL) AS p) AS u")
	case "steps-not-handed":
		// A claim hands no steps: every attempt runs its steps again.
		replaceClaims(q, "COALESCE(o.steps::text, '')", "''")
		for _, q := range []*string{&q.completeTaking, &q.completeDeleteTaking} {
			*q = mustReplace(*q, "COALESCE(t.steps::text, '')", "''")
			*q = mustReplace(*q, "COALESCE(h.steps::text, '')", "''")
		}
	case "step-unguarded":
		// A step is recorded into its row whatever the row's generation
		// and lease: a stale owner's record is accepted.
		q.step = mustReplace(q.step, "AND o.generation = (($2::jsonb -> o.id::text) ->> 0)::bigint\n  AND o.lease_until > clock_timestamp()", "")
	case "limit-ignores-holder-lease":
		// The place of a holder whose lease ran out in the snapshot of a
		// claim without floors (a sweep) is taken without the holder
		// row's lock: a renewal that commits during the claim is missed,
		// and the renewed attempt runs on beside the one that took its
		// place.
		replaceClaims(q, "    LIMIT $1\n    FOR UPDATE SKIP LOCKED\n), pstale AS (", "    LIMIT $1\n), pstale AS (")
	}
}

// breakMigration rewrites migration v's SQL for the break
// $LEASEWORK_BREAK names, if it is one of the migrations'. A table
// migrated by a broken build keeps the break until it is migrated again
// from scratch: the soak migrates a fresh table.
func breakMigration(v int, sql string) string {
	switch {
	case v == 22 && os.Getenv("LEASEWORK_BREAK") == "fair-no-arrivals":
		// An insert brings no partition to a fair queue.
		return mustReplace(sql, "    WHERE i.partition_key IS NOT NULL AND i.status = 'READY'", "    WHERE false")
	case v == 25 && os.Getenv("LEASEWORK_BREAK") == "fair-no-arrivals":
		// Nor does the notify trigger that took the step over.
		return mustReplace(sql, "    IF EXISTS (SELECT FROM inserted AS i WHERE i.partition_key IS NOT NULL AND i.status = 'READY') THEN",
			"    IF false THEN")
	case v == 14 && os.Getenv("LEASEWORK_BREAK") == "keys-listed-reversed":
		// The commit-time step puts a transaction's keyed rows in line
		// last inserted first.
		return mustReplace(sql, "array_agg(r.id ORDER BY r.n), array_agg(r.ks[1] ORDER BY r.n), array_agg(r.ks[2] ORDER BY r.n)",
			"array_agg(r.id ORDER BY r.n DESC), array_agg(r.ks[1] ORDER BY r.n DESC), array_agg(r.ks[2] ORDER BY r.n DESC)")
	}
	return sql
}

// replaceClaims rewrites both claim statements, the plain one and the one
// of fair or aging queues (claimFair): each must have old.
func replaceClaims(q *queries, old, repl string) {
	q.claim = mustReplace(q.claim, old, repl)
	q.claimFair = mustReplace(q.claimFair, old, repl)
}

func mustReplace(s, old, repl string) string {
	if !strings.Contains(s, old) {
		panic(fmt.Sprintf("lease: break %s: the statement no longer has %q", os.Getenv("LEASEWORK_BREAK"), old))
	}
	return strings.ReplaceAll(s, old, repl)
}
