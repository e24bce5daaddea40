package lease

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The scopes of a concurrency limit.
const (
	// ScopeKind limits the live attempts of one kind, in every queue.
	ScopeKind = "kind"
	// ScopeQueue limits the live attempts of one queue, of every kind.
	ScopeQueue = "queue"
	// ScopePartition limits the live attempts of each partition
	// ([Event].Partition), of every kind and queue: Name is the partition
	// the limit is for, or empty for the default of every partition that
	// has no limit of its own.
	ScopePartition = "partition"
)

// MaxLimit is the largest number of live attempts a limit may allow.
const MaxLimit = 10000

// limitSlots is how many slot rows keep each limit, each a share of it,
// in the claim's and the limits' statements: the slots' keys of the limit
// of id L run from L * 100000 to L * 100000 + limitSlots - 1 (migration
// 17's check holds them to 16).
const limitSlots = "16"

// maxByBytes bounds who set a limit, as the audit records it.
const maxByBytes = 1024

// Limit is a concurrency limit: at most Max attempts of its kind or its
// queue are live at once across every worker. An attempt is live from its
// claim until it ends (any outcome written, a release, a requeue, a
// delete) or its lease runs out, whichever is first: a killed or paused
// owner stops counting when its lease does, and its late writes are then
// refused, as every stale owner's are. A limit counts attempts, not
// effects: a handler that runs on past its lease (it ignores its context)
// still runs while another attempt takes its place; bound handlers with
// an attempt timeout shorter than the lease.
//
// A limit of [ScopePartition] holds each partition to its Max: the
// partition's own limit, else the default (Name empty); a partition under
// neither is not counted. The due rows a full partition holds back are set
// aside (WAITING, without a key) where the claim does not read them, so
// that a backlog behind a full partition costs claims nothing; they are
// READY again when it has room.
type Limit struct {
	// Scope is [ScopeKind], [ScopeQueue] or [ScopePartition].
	Scope string
	// Name is the kind's or the queue's name, or the partition's: empty
	// for the default of every partition.
	Name string
	// Max is the most live attempts, from 0 (none start: the kind or
	// queue is held) to [MaxLimit].
	Max int
}

// LimitInfo is a limit as [Store.Limits] reads it.
type LimitInfo struct {
	Limit
	// Live is how many attempts are counted under the limit now: claimed
	// under it, not ended, their lease not run out. For a partition's
	// limit, those of the partition; for the default partition limit,
	// those of every partition under it (each partition under it is held
	// to Max on its own: [Store.WhyNotRunning] says one row's partition's
	// figures).
	Live int
	// HeldBack counts the READY rows of the limit's kind (in every queue)
	// or queue (of every kind) that are due now while the limit is full:
	// no share of it has room for one more live attempt. They wait for a
	// place; 0 when the limit has room. A row counts whatever else holds
	// it too (its queue paused, say). For a partition's limit, it counts
	// the rows set aside (WAITING without a key) of its partition, or of
	// every partition under the default; a due READY row of a full
	// partition that no claim has set aside yet is not counted.
	HeldBack int64
	// SetAt is when the limit was last set, by the database clock; SetBy
	// who set it, as the caller of [Store.SetLimit] said.
	SetAt time.Time
	SetBy string
}

// LimitChange is one change of a limit, as [Store.LimitChanges] reads it.
type LimitChange struct {
	At time.Time
	// Scope is the limit's: [ScopeKind], [ScopeQueue] or [ScopePartition]
	// for a concurrency limit, "rate:kind" or "rate:queue" for a rate
	// limit ([RateLimit]), "weight" for a fair queue's weight ([Weight]:
	// Name is its queue), "aging" for a queue's priority aging
	// ([Store.SetAging]: Name is the queue).
	Scope, Name string
	// Partition is a weight's partition: empty for a queue's default, and
	// for every other scope.
	Partition string
	// Old and New are the limit before and after the change: -1 for none
	// (the change declared the limit, or cleared it). For a rate limit,
	// its Max; for a weight, the weight; for an aging, 1 when the queue
	// had one, before and after the change (a set: New 1; a clear: Old 1,
	// New -1).
	Old, New int
	// Per is a rate limit's period, or an aging's wait: as the change set
	// it, or, for a clear, as it was. Zero for a concurrency limit.
	Per time.Duration
	By  string
}

// setLimitSQL declares or changes limit ($1, $2) to $3 live attempts, set
// by $4: the limit's row and the change in the audit, with the limit as
// it was. sharesSQL then gives its 16 slots their shares of $3. The
// attempts a slot counts stay counted when its share shrinks: a slot past
// its share admits no one until enough of them end, and a raise finds
// them counted still.
const setLimitSQL = `
WITH old AS (
    SELECT max_live FROM {{schema}}.{{name "limits"}} WHERE scope = $1 AND name = $2 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "limits"}} AS l (scope, name, max_live, set_by) VALUES ($1, $2, $3, $4)
    ON CONFLICT (scope, name) DO UPDATE
    SET max_live = EXCLUDED.max_live, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING l.id
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by)
    SELECT $1, $2, (SELECT max_live FROM old), $3, $4 FROM set
)
SELECT (SELECT max_live FROM old), (SELECT id FROM set)`

// sharesSQL runs after setLimitSQL in its transaction (the slots' foreign
// key needs the limit's row first): slot g of limit $1 gets $2 / 16, and
// one more when g < $2 mod 16.
const sharesSQL = `
INSERT INTO {{schema}}.{{name "limit_slots"}} AS s (key, limit_id, slot, cap)
SELECT $1::bigint * 100000 + g, $1, g, $2::integer / ` + limitSlots + ` + (g < $2::integer % ` + limitSlots + `)::integer
FROM generate_series(0, ` + limitSlots + ` - 1) AS g
ON CONFLICT (key) DO UPDATE SET cap = EXCLUDED.cap`

// clearLimitSQL removes limit ($1, $2), its slots with it and their
// releases not yet counted, and writes the change in the audit, by $3.
// Idle workers are woken on the table's channel ($4) with an empty
// payload, "look again".
const clearLimitSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "limits"}} WHERE scope = $1 AND name = $2 RETURNING max_live, id
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by)
    SELECT $1, $2, max_live, NULL, $3 FROM gone
), releases AS (
    DELETE FROM {{schema}}.{{name "limit_releases"}} AS r
    WHERE r.key >= (SELECT id FROM gone)::bigint * 100000 AND r.key < (SELECT id FROM gone)::bigint * 100000 + ` + limitSlots + `
)
SELECT count(*) FROM gone, pg_notify($4, '')`

// limitLiveSQL is a limit l's live attempts (live): the rows counted in
// one of its slots, INPROGRESS, their lease running, read through the
// index of such rows (migration 18), once for the limit; and the room of
// its shares (room): each slot's share less the live attempts counted in
// it, none for a slot past its share (a lowered limit's). The limit is
// full, and holds its rows back, when room is 0. An attempt whose lease
// ran out gives no room to a claim with floors until a sweep (a claim
// without) takes its place, which the worker runs every second.
const limitLiveSQL = `
    SELECT COALESCE(sum(p.n), 0) AS live, COALESCE(sum(GREATEST(s.cap - COALESCE(p.n, 0), 0)), 0) AS room
    FROM {{schema}}.{{name "limit_slots"}} AS s
    LEFT JOIN (` + liveBySlot + `
          AND u.key BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + ` + limitSlots + ` - 1
        GROUP BY u.key) AS p ON p.key = s.key
    WHERE s.key BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + ` + limitSlots + ` - 1`

// liveBySlot is the start of a count of the live attempts per slot key
// (u.key), of both a row's slots, through the index of the rows counted
// under a limit (migration 18): its predicate spelled out.
const liveBySlot = `
        SELECT u.key, count(*) AS n
        FROM {{table}} AS h
        CROSS JOIN LATERAL (VALUES (h.kind_slot), (h.queue_slot)) AS u(key)
        WHERE h.status = 'INPROGRESS' AND (h.kind_slot IS NOT NULL OR h.queue_slot IS NOT NULL)
          AND h.lease_until > statement_timestamp() AND u.key IS NOT NULL`

// limitsSQL reads every limit with its live attempts and, when it is
// full, the due READY rows it holds back; 0 when it has room.
//
// The live attempts are counted per slot in one read of the index of the
// rows counted under a limit (live), for every limit at once, then per
// limit with the room of its shares, as in limitLiveSQL. The due rows are
// counted once for the statement, by queue and kind (due), and only when
// a limit is full: one read of the READY index, whose entries hold the
// due time, so that rows not yet due are passed over in the index, and
// the finished history is never read.
//
// Nothing is read per limit: the planner guesses hundreds of limits for a
// table never analyzed, and a read per limit multiplied by that guess
// can give the statement an estimated cost at which the server compiles
// it (JIT), for half a second at each call.
const limitsSQL = `
WITH due AS MATERIALIZED (
    SELECT queue, kind, count(*) AS n FROM {{table}}
    WHERE status = 'READY' AND next_attempt_at <= statement_timestamp()
    GROUP BY queue, kind
), live AS (` + liveBySlot + `
    GROUP BY u.key
), counted AS (
    SELECT s.limit_id, COALESCE(sum(p.n), 0) AS live, sum(GREATEST(s.cap - COALESCE(p.n, 0), 0)) AS room
    FROM {{schema}}.{{name "limit_slots"}} AS s
    LEFT JOIN live AS p ON p.key = s.key
    GROUP BY s.limit_id
)
SELECT l.scope, l.name, l.max_live, l.set_at, l.set_by, COALESCE(v.live, 0),
    CASE
        WHEN COALESCE(v.room, l.max_live) > 0 THEN 0
        WHEN l.scope = 'queue' THEN (SELECT COALESCE(sum(d.n), 0) FROM due AS d WHERE d.queue = l.name)
        ELSE (SELECT COALESCE(sum(d.n), 0) FROM due AS d WHERE d.kind = l.name)
    END::bigint
FROM {{schema}}.{{name "limits"}} AS l
LEFT JOIN counted AS v ON v.limit_id = l.id
ORDER BY l.scope, l.name`

// setPartitionLimitSQL declares or changes the limit of partition $1 (”
// for the default) to $2 live attempts, set by $3, with the change in the
// audit. Every slot the change may give room (the partition's, or every
// slot for the default) gets a release of n = 0, "look again": the next
// claims count it and bring back the rows set aside that now fit. Idle
// workers are woken on the table's channel ($4).
const setPartitionLimitSQL = `
WITH old AS (
    SELECT max_live FROM {{schema}}.{{name "partition_limits"}} WHERE partition = $1 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "partition_limits"}} AS l (partition, max_live, set_by) VALUES ($1, $2, $3)
    ON CONFLICT (partition) DO UPDATE
    SET max_live = EXCLUDED.max_live, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING l.partition
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by)
    SELECT 'partition', $1, (SELECT max_live FROM old), $2, $3 FROM set
), look AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT s.id, 0 FROM {{schema}}.{{name "partition_slots"}} AS s
    WHERE s.partition = $1 OR $1 = ''
)
SELECT (SELECT max_live FROM old) FROM pg_notify($4, '')`

// clearPartitionLimitSQL removes the limit of partition $2 (” for the
// default; $1 is the scope, 'partition'), written to the audit as set by
// $3, with a release of n = 0 for every slot it may change, as in
// setPartitionLimitSQL: a partition left under no limit has its slot
// removed, and its rows set aside READY again, by the claims that count
// them.
const clearPartitionLimitSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "partition_limits"}} WHERE partition = $2 AND $1 = 'partition' RETURNING max_live
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by)
    SELECT 'partition', $2, max_live, NULL, $3 FROM gone
), look AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT s.id, 0 FROM {{schema}}.{{name "partition_slots"}} AS s
    WHERE (s.partition = $2 OR $2 = '') AND EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) FROM gone, pg_notify($4, '')`

// partitionLimitsSQL reads the partition limits, as limitsSQL the others:
// each with the live attempts of its partition (the default: of every
// partition under it), read through the index of attempts counted in a
// partition's slot (migration 20), and the rows its partitions set aside,
// through theirs.
const partitionLimitsSQL = `
WITH live AS MATERIALIZED (
    SELECT h.partition_key AS partition, count(*) AS n FROM {{table}} AS h
    WHERE h.status = 'INPROGRESS' AND h.partition_slot IS NOT NULL AND h.lease_until > statement_timestamp()
    GROUP BY h.partition_key
), aside AS MATERIALIZED (
    SELECT a.partition_key AS partition, count(*) AS n FROM {{table}} AS a
    WHERE a.status = 'WAITING' AND a.key IS NULL
    GROUP BY a.partition_key
), own AS (
    SELECT partition FROM {{schema}}.{{name "partition_limits"}} WHERE partition <> ''
)
SELECT 'partition', l.partition, l.max_live, l.set_at, l.set_by,
    CASE WHEN l.partition = '' THEN (SELECT COALESCE(sum(v.n), 0) FROM live AS v WHERE v.partition NOT IN (SELECT partition FROM own))
         ELSE (SELECT COALESCE(sum(v.n), 0) FROM live AS v WHERE v.partition = l.partition) END::bigint,
    CASE WHEN l.partition = '' THEN (SELECT COALESCE(sum(a.n), 0) FROM aside AS a WHERE a.partition NOT IN (SELECT partition FROM own))
         ELSE (SELECT COALESCE(sum(a.n), 0) FROM aside AS a WHERE a.partition = l.partition) END::bigint
FROM {{schema}}.{{name "partition_limits"}} AS l
ORDER BY l.partition`

// limitChangesSQL reads the latest $1 changes, latest first.
const limitChangesSQL = `
SELECT at, scope, name, COALESCE(old_max, -1), COALESCE(new_max, -1), set_by, COALESCE(period_us, 0), COALESCE(partition, '')
FROM {{schema}}.{{name "limit_changes"}}
ORDER BY id DESC
LIMIT $1`

// checkLimitName checks a limit's scope and name, for op.
func checkLimitName(op, scope, name string) error {
	switch scope {
	case ScopeKind:
		if name == "" {
			return fmt.Errorf("lease: %s: Name is empty; give the kind to limit", op)
		}
		if err := validateText("Name", name, MaxKindBytes); err != nil {
			return fmt.Errorf("lease: %s: %w", op, err)
		}
	case ScopeQueue:
		if name == "" {
			return fmt.Errorf("lease: %s: Name is empty; give the queue to limit (%q for the default queue)", op, DefaultQueue)
		}
		if err := validateText("Name", name, MaxQueueBytes); err != nil {
			return fmt.Errorf("lease: %s: %w", op, err)
		}
	case ScopePartition:
		if err := validateText("Name", name, MaxPartitionBytes); err != nil {
			return fmt.Errorf("lease: %s: %w", op, err)
		}
	default:
		return fmt.Errorf("lease: %s: Scope is %q; it must be %q, %q or %q", op, scope, ScopeKind, ScopeQueue, ScopePartition)
	}
	return nil
}

// SetLimit declares limit l, or changes it, across every worker of the
// table: claims that begin after it returns keep it. by names who set it,
// for the audit ([Store.LimitChanges]); it may be empty. It reports the
// limit it replaced: -1 when there was none.
//
// A limit binds claims, not attempts already running: a claim whose
// statement began before the change keeps the limit as it was, and the
// attempts running when a limit is first declared (or declared again
// after ClearLimit) are not counted under it. A lowered limit binds new
// claims at once, but the attempts running past the new Max keep their
// places, and run on, until they end: until then, up to the old Max may be
// live. Either way the excess lasts no longer than those attempts (at
// most their lease, unless they renew it). A raised limit admits more at
// once (the attempts running stay counted) and wakes no one: idle workers
// see it at their next poll or wakeup.
//
// The completions that hand a key's next event to their own worker (see
// Order per key in the package doc) hand over none that a limit covers:
// a claim takes it, with its place.
func (s *Store) SetLimit(ctx context.Context, l Limit, by string) (old int, err error) {
	if err := checkLimitName("set limit", l.Scope, l.Name); err != nil {
		return 0, err
	}
	if l.Max < 0 || l.Max > MaxLimit {
		return 0, fmt.Errorf("lease: set limit: Max is %d; it must be between 0 and %d", l.Max, MaxLimit)
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return 0, fmt.Errorf("lease: set limit: %w", err)
	}
	if l.Scope == ScopePartition {
		var was sql.NullInt64
		if err := s.db.QueryRowContext(ctx, s.q.setPartitionLimit, l.Name, l.Max, by, s.channel).Scan(&was); err != nil {
			return 0, s.wrapErr("set limit", err)
		}
		if !was.Valid {
			return -1, nil
		}
		return int(was.Int64), nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.wrapErr("set limit", err)
	}
	defer tx.Rollback()
	var was sql.NullInt64
	var id int64
	if err := tx.QueryRowContext(ctx, s.q.setLimit, l.Scope, l.Name, l.Max, by).Scan(&was, &id); err != nil {
		return 0, s.wrapErr("set limit", err)
	}
	if _, err := tx.ExecContext(ctx, s.q.shares, id, l.Max); err != nil {
		return 0, s.wrapErr("set limit", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, s.wrapErr("set limit", err)
	}
	if !was.Valid {
		return -1, nil
	}
	return int(was.Int64), nil
}

// ClearLimit removes the limit of scope and name, written to the audit
// as set by by, and reports whether there was one. The attempts counted
// under it run on; claims that begin after it returns no longer keep it,
// and idle workers are woken to claim what it held back.
func (s *Store) ClearLimit(ctx context.Context, scope, name, by string) (bool, error) {
	if err := checkLimitName("clear limit", scope, name); err != nil {
		return false, err
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return false, fmt.Errorf("lease: clear limit: %w", err)
	}
	q := s.q.clearLimit
	if scope == ScopePartition {
		q = s.q.clearPartitionLimit
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q, scope, name, by, s.channel).Scan(&n); err != nil {
		return false, s.wrapErr("clear limit", err)
	}
	return n > 0, nil
}

// Limits returns every limit declared, by scope and name, with its live
// attempts now and the due rows it holds back ([LimitInfo].HeldBack), in
// one statement. It reads the live attempts counted under every limit
// through their index, and, when a limit is full, the READY index once,
// counting every due row of the table (the rows not yet due are passed
// over in the index): call it at metrics-scrape rates, not per job.
func (s *Store) Limits(ctx context.Context) ([]LimitInfo, error) {
	out, err := s.readLimits(ctx, nil, s.q.limits)
	if err != nil {
		return nil, err
	}
	return s.readLimits(ctx, out, s.q.partitionLimits)
}

// readLimits appends to out the limits that query q reads.
func (s *Store) readLimits(ctx context.Context, out []LimitInfo, q string) ([]LimitInfo, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, s.wrapErr("limits", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l LimitInfo
		if err := rows.Scan(&l.Scope, &l.Name, &l.Max, &l.SetAt, &l.SetBy, &l.Live, &l.HeldBack); err != nil {
			return nil, s.wrapErr("limits", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("limits", err)
	}
	return out, nil
}

// LimitChanges returns the latest n changes of the limits, latest first:
// n from 1 to 1000.
func (s *Store) LimitChanges(ctx context.Context, n int) ([]LimitChange, error) {
	if n < 1 || n > 1000 {
		return nil, fmt.Errorf("lease: limit changes: n is %d; it must be between 1 and 1000", n)
	}
	rows, err := s.db.QueryContext(ctx, s.q.limitChanges, n)
	if err != nil {
		return nil, s.wrapErr("limit changes", err)
	}
	defer rows.Close()
	var out []LimitChange
	for rows.Next() {
		var c LimitChange
		var per int64
		if err := rows.Scan(&c.At, &c.Scope, &c.Name, &c.Old, &c.New, &c.By, &per, &c.Partition); err != nil {
			return nil, s.wrapErr("limit changes", err)
		}
		c.Per = time.Duration(per) * time.Microsecond
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("limit changes", err)
	}
	return out, nil
}
