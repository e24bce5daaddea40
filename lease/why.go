package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// A ReasonKind says what keeps a row from running, in [Reason].Kind. Its
// values are stable: scripts and dashboards may branch on them.
type ReasonKind string

// The reasons a row is not running.
const (
	// ReasonLimit: a READY row, due, whose kind's or queue's concurrency
	// limit is full (see [LimitInfo].HeldBack). It starts when an
	// attempt under the limit ends, or the limit is raised or cleared.
	ReasonLimit ReasonKind = "limit"
	// ReasonPaused: its queue is paused ([Store.PauseQueue]): a READY
	// row, a WAITING row, or a row whose lease ran out, none of which is
	// claimed until the queue is resumed.
	ReasonPaused ReasonKind = "paused"
	// ReasonKey: a WAITING row, behind its key's head (see Order per key
	// in the package doc). It runs once the head and the rows before it
	// have finished; a FAILED head holds the key until it is requeued or
	// discarded.
	ReasonKey ReasonKind = "key"
	// ReasonNotDue: a READY row whose next attempt is later (a retry
	// backing off, a snooze, an event enqueued to run later).
	ReasonNotDue ReasonKind = "not_due"
	// ReasonPartition: a row of a partition ([Event].Partition) whose
	// concurrency limit ([ScopePartition]: the partition's own, else the
	// default) is full: a READY row, due, or a row the limit set aside
	// (WAITING without a key, see [Limit]). It starts when an attempt
	// of the partition ends, or the limit is raised or cleared. A row set
	// aside has this reason whatever its partition's room, unless its
	// partition's rate limit holds it (then ReasonRate says so): while the
	// partition has room again, the next claims of its queue take it (or
	// bring it back READY, for the workers of its kind); with no limit any
	// more, they bring it back READY.
	ReasonPartition ReasonKind = "partition"
	// ReasonRate: a READY row, due, or a row whose lease ran out, of a
	// kind, queue or partition whose rate limit ([RateLimit]) has no room
	// now for the starts its event costs ([Event].Cost), or a row its
	// partition's rate limit set aside (WAITING without a key, Partition
	// and SetAside as for ReasonPartition): it starts once enough
	// starts have left the limit's window (NextAt), or the limit is
	// raised or cleared, unless other events take the room first. An
	// event that costs more than the limit's Max never starts under it
	// (NextAt is zero).
	ReasonRate ReasonKind = "rate"
	// ReasonFair: a READY row, due, of a fair queue ([Weight]) whose
	// partition is ahead of the partition furthest behind: its pass (the
	// rows claimed of it, over its weight) exceeds the queue's lowest, so
	// about Ahead rows of the partitions behind it go first. It is a turn,
	// not a hold: a claim of more rows than that takes it at once. A due
	// row without a partition in a fair queue whose partitions are being
	// served has it too (Partition empty): it is taken in the queue's
	// order, behind the fair ones. A row of a partition fair scheduling
	// does not serve yet has no such reason: the next claim brings its
	// partition in level with the one furthest behind.
	ReasonFair ReasonKind = "fair"
)

// maxAhead bounds how many of the rows waiting before a WAITING row
// [Store.WhyNotRunning] counts: the LIMIT of whySQL.
const maxAhead = 1000

// Reason is one thing that keeps a row from running, as
// [Store.WhyNotRunning] reads it: Kind, a sentence for an operator
// (Text), and the figures behind it, each set for the kinds it names.
type Reason struct {
	Kind ReasonKind
	// Text says it in one sentence, with the figures below, for example
	// "held by concurrency limit kind:send-email (5/5 live): it starts
	// when one of those attempts ends, or the limit is raised or
	// cleared".
	Text string

	// Limit is the full limit, and Live its live attempts, for
	// ReasonLimit and ReasonPartition. For ReasonPartition, Limit is the
	// limit that applies to the row's partition: its own (Name is the
	// partition) or the default (Name empty); the zero Limit when none
	// does any more (a row set aside by a limit cleared since). Live
	// counts the attempts of that partition alone, under either.
	Limit Limit
	Live  int
	// Partition is the row's partition, and SetAside whether the limit
	// set it aside (WAITING without a key, out of the claim's index),
	// for ReasonPartition and a partition's ReasonRate; for ReasonFair,
	// the row's partition (empty for a row without one).
	Partition string
	SetAside  bool
	// Queue is the row's queue, for ReasonPaused and ReasonFair; PausedAt
	// when it was paused.
	Queue    string
	PausedAt time.Time
	// Key is the row's key, HeadID and HeadStatus its head (READY,
	// INPROGRESS or FAILED; HeadID 0 when the key has none just now: it
	// is being passed on), and Ahead the rows waiting before this one,
	// counted up to 1000 (1000 means at least that many), for ReasonKey.
	// For ReasonFair, Ahead is how many rows the row's partition is ahead
	// of the partition furthest behind: its pass (with what claims owe
	// it) less the queue's lowest, times Weight, rounded; about how many rows of the partitions behind
	// it go first (exactly that many of the one furthest behind, if its
	// weight is the same). Zero for a row without a partition.
	Key        string
	HeadID     int64
	HeadStatus leasework.Status
	Ahead      int
	// Weight is the weight of the row's partition in its fair queue (its
	// own, else the queue's default), for ReasonFair; zero for a row
	// without a partition.
	Weight int
	// DueAt is when the row comes due, by the database clock, and DueIn
	// how long from the database's now, for ReasonNotDue. A due time of
	// infinity (written before the schema refused it) is a zero DueAt.
	DueAt time.Time
	DueIn time.Duration
	// Rate is the rate limit without room, Recent the starts it counts in
	// the window that ends now, and Cost the starts the row's event takes
	// ([Event].Cost), for ReasonRate. NextAt is when the limit first has
	// room for Cost starts, by the database clock, if no other start is
	// made meanwhile, and NextIn how long from the database's now; both
	// zero when Cost is more than the limit's Max.
	Rate   RateLimit
	Recent int
	Cost   int
	NextAt time.Time
	NextIn time.Duration
}

// whySQL reads row $1 and, by the primary keys of the queues and limits
// tables and the indexes of order per key, what keeps it from running:
// its queue's pause; for a READY row, each limit of its kind and queue
// with its live attempts and the room of its shares (limitLiveSQL: the
// index of the rows counted under a limit); for a WAITING row, its key's
// head (the live-key index, as keyHeadSQL) and the rows waiting before it
// (the waiting index, up to maxAhead); for a READY row or a row set aside
// (WAITING without a key) of a partition, its partition limit
// (partitionLimitSQL); for a READY row or a row whose lease ran out, each
// rate limit of its kind and queue with its starts in the window and its
// room (rateRoomSQL: the limit by its primary key, its 16 shares by
// theirs), for a row a claim would take back; for a READY row of a fair
// queue, the queue's default weight and its partition's, and its
// partition's pass and the queue's lowest (fairSQL). The reads a status
// does not need are not made.
const whySQL = `
SELECT o.status, o.kind, o.queue, COALESCE(o.key, ''),
    o.next_attempt_at > statement_timestamp(),
    CASE WHEN isfinite(o.next_attempt_at) THEN o.next_attempt_at END,
    o.lease_until <= statement_timestamp(),
    statement_timestamp(), p.paused_at,
    kl.max_live, kl.live, kl.room, ql.max_live, ql.live, ql.room,
    hd.id, hd.status, ah.n,
    COALESCE(o.partition_key, ''), pl.name, pl.max_live, pl.live,
    o.cost, kr.max_starts, kr.period_us, kr.recent, kr.room, kr.next_at,
    qr.max_starts, qr.period_us, qr.recent, qr.room, qr.next_at,
    fr.weight, fr.pass, fr.low,
    pr.name, pr.max_starts, pr.period_us, pr.recent, pr.room, pr.next_at
FROM {{table}} AS o
LEFT JOIN {{schema}}.{{name "queues"}} AS p ON p.queue = o.queue
LEFT JOIN LATERAL (
    SELECT l.max_live, v.live, v.room FROM {{schema}}.{{name "limits"}} AS l
    CROSS JOIN LATERAL (` + limitLiveSQL + `) AS v
    WHERE l.scope = 'kind' AND l.name = o.kind AND o.status = 'READY') AS kl ON true
LEFT JOIN LATERAL (
    SELECT l.max_live, v.live, v.room FROM {{schema}}.{{name "limits"}} AS l
    CROSS JOIN LATERAL (` + limitLiveSQL + `) AS v
    WHERE l.scope = 'queue' AND l.name = o.queue AND o.status = 'READY') AS ql ON true
LEFT JOIN LATERAL (
    SELECT h.id, h.status FROM {{table}} AS h
    WHERE h.key = o.key AND h.status IN ('READY', 'INPROGRESS', 'FAILED') AND h.key IS NOT NULL
      AND o.status = 'WAITING' AND o.key IS NOT NULL
    ORDER BY h.key_seq NULLS FIRST, h.id
    LIMIT 1) AS hd ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {{table}} AS w
        WHERE w.key = o.key AND w.status = 'WAITING' AND w.key_seq < o.key_seq
          AND o.status = 'WAITING' AND o.key IS NOT NULL
        LIMIT 1000) AS a) AS ah ON true
LEFT JOIN LATERAL (` + partitionLimitSQL + `) AS pl ON true
LEFT JOIN LATERAL (
    SELECT l.max_starts, l.period_us, w.* FROM {{schema}}.{{name "rate_limits"}} AS l
    CROSS JOIN LATERAL (` + rateRoomSQL + `) AS w
    WHERE l.scope = 'kind' AND l.name = o.kind
      AND (o.status = 'READY' OR (o.status = 'INPROGRESS' AND o.lease_until <= statement_timestamp() AND ` + takenBack + `))) AS kr ON true
LEFT JOIN LATERAL (
    SELECT l.max_starts, l.period_us, w.* FROM {{schema}}.{{name "rate_limits"}} AS l
    CROSS JOIN LATERAL (` + rateRoomSQL + `) AS w
    WHERE l.scope = 'queue' AND l.name = o.queue
      AND (o.status = 'READY' OR (o.status = 'INPROGRESS' AND o.lease_until <= statement_timestamp() AND ` + takenBack + `))) AS qr ON true
LEFT JOIN LATERAL (` + fairSQL + `) AS fr ON true
LEFT JOIN LATERAL (` + partitionRateSQL + `) AS pr ON true
WHERE o.id = $1`

// partitionRateSQL is the rate limit of row o's partition (migration 24),
// for whySQL: the partition's own, else the default, read by their primary
// key, with the starts its slot counts in the window that ends now
// (recent), its room for more, and, when the room is less than the row's
// cost and the cost is within the limit's Max, when it first has room for
// that cost if no other start is made (next_at: each start leaves the
// window a period after it was made), for a READY row, a row set aside,
// or a row a claim would take back. The slot is read by its primary key.
const partitionRateSQL = `
    SELECT l.partition AS name, l.max_starts, l.period_us, w.recent, GREATEST(l.max_starts - w.recent, 0) AS room,
        CASE WHEN GREATEST(l.max_starts - w.recent, 0) < o.cost AND o.cost <= l.max_starts THEN (
            SELECT t FROM unnest(w.starts) AS t
            ORDER BY t
            OFFSET o.cost - GREATEST(l.max_starts - w.recent, 0) - 1
            LIMIT 1) + l.period_us * interval '1 microsecond' END AS next_at
    FROM {{schema}}.{{name "partition_rates"}} AS l
    CROSS JOIN LATERAL (
        SELECT count(*) AS recent, array_agg(t) AS starts
        FROM {{schema}}.{{name "partition_slots"}} AS s
        CROSS JOIN LATERAL unnest(s.starts) AS t
        WHERE s.partition = o.partition_key AND t > statement_timestamp() - l.period_us * interval '1 microsecond') AS w
    WHERE l.partition IN (o.partition_key, '') AND o.partition_key IS NOT NULL
      AND (o.status = 'READY' OR (o.status = 'WAITING' AND o.key IS NULL)
           OR (o.status = 'INPROGRESS' AND o.lease_until <= statement_timestamp() AND ` + takenBack + `))
    -- The partition's own limit first: any name sorts after ''.
    ORDER BY l.partition DESC
    LIMIT 1`

// fairSQL is the fair scheduling of row o, for whySQL, when its queue is
// fair (it has a default weight) and the row READY: the weight of its
// partition (its own, else the queue's default; the default for a row
// without a partition), its partition's pass with the debts claims left
// to it (as the claim's candidates count them), and the queue's lowest
// pass. The weights are read by the primary key of fair_weights, the
// pass by that of fair_keys, its debts through fair_debts' (queue,
// partition, id) index (a claim pays them when it next locks the pass),
// and the lowest pass as the claim reads it (fair_now): the first entry
// of the queue in fair_keys' (queue, pass) index; so the read does not
// grow with the partitions served.
const fairSQL = `
    SELECT COALESCE((SELECT pw.weight FROM {{schema}}.{{name "fair_weights"}} AS pw
                     WHERE pw.queue = o.queue AND pw.partition = o.partition_key), dw.weight) AS weight,
        (SELECT k.pass + COALESCE((SELECT sum(d.pass) FROM {{schema}}.{{name "fair_debts"}} AS d
                                   WHERE d.queue = o.queue AND d.partition = o.partition_key), 0)
         FROM {{schema}}.{{name "fair_keys"}} AS k
         WHERE k.queue = o.queue AND k.partition = o.partition_key) AS pass,
        (SELECT k.pass FROM {{schema}}.{{name "fair_keys"}} AS k
         WHERE k.queue = o.queue
         ORDER BY k.pass
         LIMIT 1) AS low
    FROM {{schema}}.{{name "fair_weights"}} AS dw
    WHERE dw.queue = o.queue AND dw.partition = '' AND o.status = 'READY'`

// takenBack says that row o, INPROGRESS with its lease run out, is taken
// back by a claim (a start), as the claim's expired leases are: not on
// its last attempt (that one ends FAILED) and not cancelled.
const takenBack = `o.attempt < o.max_attempts AND o.cancelled_at IS NULL`

// rateRoomSQL reads rate limit l's starts in the window that ends now
// (recent) and its room for more (room: each share's cap less its starts
// in the window, none below 0), as the claim counts them; and, when the
// room is less than row o's cost and the cost is within the limit's Max,
// when it first has room for that cost if no other start is made
// (next_at): each start leaves the window a period after it was made,
// and gives its share's room back one more start once the share's starts
// in the window are fewer than its cap. The shares are read by their
// primary key, 16 of them, each with at most its cap of starts in the
// window (more after a lowered Max).
const rateRoomSQL = `
        SELECT w.recent, w.room,
            (SELECT min(g.leave) FROM (
                 SELECT e.leave, sum(e.frees) OVER (ORDER BY e.leave) AS gained
                 FROM (
                     SELECT t.at + l.period_us * interval '1 microsecond' AS leave,
                         (s.cap - count(*) OVER (PARTITION BY s.key)
                          + row_number() OVER (PARTITION BY s.key ORDER BY t.at) >= 1)::integer AS frees
                     FROM {{schema}}.{{name "rate_shares"}} AS s
                     CROSS JOIN LATERAL unnest(s.starts) AS t(at)
                     WHERE s.key BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + ` + limitSlots + ` - 1
                       AND t.at > statement_timestamp() - l.period_us * interval '1 microsecond') AS e) AS g
             WHERE w.room < o.cost AND o.cost <= l.max_starts AND w.room + g.gained >= o.cost) AS next_at
        FROM (
            SELECT COALESCE(sum(x.recent), 0)::integer AS recent, COALESCE(sum(GREATEST(s.cap - x.recent, 0)), 0)::integer AS room
            FROM {{schema}}.{{name "rate_shares"}} AS s
            CROSS JOIN LATERAL (
                SELECT count(*) AS recent FROM unnest(s.starts) AS t
                WHERE t > statement_timestamp() - l.period_us * interval '1 microsecond') AS x
            WHERE s.key BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + ` + limitSlots + ` - 1) AS w`

// partitionLimitSQL is the partition limit of row o, for whySQL: the
// partition's own limit, else the default (name ”), each read by the
// partition limits' primary key, with the live attempts of the partition
// (live), for a READY row or a row set aside (WAITING without a key) of a
// partition. The live attempts are those its slot counts (used, less the
// places given back that no claim has counted yet: a slot's count, as
// the claim keeps it), less those among them whose lease ran out, which
// no longer count, as in [Store.Limits], though the claim keeps their
// place until a sweep takes it: the slot and its releases are read by
// their primary keys, and the attempts whose lease ran out through the
// index of attempts counted in a partition's slot (migration 20), whose
// range of leases run out holds only those a sweep has not yet taken; so
// the read does not grow with the partition's live attempts, nor with
// other partitions'.
const partitionLimitSQL = `
    SELECT l.partition AS name, l.max_live,
        COALESCE((
            SELECT GREATEST(s.used
                - COALESCE((SELECT sum(r.n) FROM {{schema}}.{{name "partition_releases"}} AS r WHERE r.slot = s.id), 0)
                - (SELECT count(*) FROM {{table}} AS h
                   WHERE h.status = 'INPROGRESS' AND h.partition_slot IS NOT NULL
                     AND h.lease_until <= statement_timestamp() AND h.partition_slot = s.id), 0)
            FROM {{schema}}.{{name "partition_slots"}} AS s
            WHERE s.partition = o.partition_key), 0) AS live
    FROM {{schema}}.{{name "partition_limits"}} AS l
    WHERE l.partition IN (o.partition_key, '') AND o.partition_key IS NOT NULL
      AND (o.status = 'READY' OR (o.status = 'WAITING' AND o.key IS NULL))
    -- The partition's own limit first: any name sorts after ''.
    ORDER BY l.partition DESC
    LIMIT 1`

// whyStatements are the statements of why.go, rendered for the store.
type whyStatements struct {
	why string
}

func (s *Store) renderWhy() whyStatements {
	return whyStatements{why: s.render(whySQL)}
}

// WhyNotRunning returns every reason row id is not running now, read in
// one statement by the database clock, in this order: its queue paused
// ([ReasonPaused]); its key's head before it, for a WAITING row
// ([ReasonKey]); not due yet, for a READY row ([ReasonNotDue]); its
// kind's, then its queue's concurrency limit full, for a READY row that
// is due ([ReasonLimit]); its partition's limit full, for a READY row
// that is due, or set aside by its partition's limit, for a WAITING row
// without a key ([ReasonPartition]: a row set aside has it alone, after
// its queue's pause); its kind's, then its queue's rate limit without
// room for its cost, for a READY row that is due or an INPROGRESS row
// whose lease ran out ([ReasonRate]); its partition ahead of the partition
// furthest behind in its fair queue, or no partition in a fair queue whose
// partitions are served, for a READY row that is due ([ReasonFair]).
//
// It returns an empty list for a row nothing in the database holds back:
// a READY row due and under no full limit, or an INPROGRESS row whose
// lease ran out under no rate limit without room, in a running queue (the
// next claim of a worker serving its kind and queue takes it); and for a
// running row (INPROGRESS, its lease running: the lease deadline is
// [Row].LeaseUntil) and a finished one (DONE, FAILED, DISCARDED:
// [Store.Requeue] and [Store.Discard] are the repairs of a FAILED row). It
// does not know which workers run: a row of a kind or queue no worker
// serves has no reason here. Nor does it see what a claim does besides
// the limits' room: a claim takes its rows in order and none after the
// first whose cost does not fit a rate limit's room, so a row with room
// for its own cost may wait behind a costlier one.
//
// A row that does not exist is [ErrNotFound]. On a table whose schema
// predates fair scheduling (migration 22) it fails, naming what is
// missing.
func (s *Store) WhyNotRunning(ctx context.Context, id int64) ([]Reason, error) {
	var (
		status, kind, queue, key string
		later                    bool
		lapsed                   sql.NullBool
		dueAt, pausedAt          sql.NullTime
		now                      time.Time
		kindMax, kindLive, kindRoom,
		queueMax, queueLive, queueRoom sql.NullInt64
		headID              sql.NullInt64
		headStatus          sql.NullString
		ahead               sql.NullInt64
		partition           string
		partName            sql.NullString
		partMax, partLive   sql.NullInt64
		cost                int
		kindRate, queueRate rateRead
		fairWeight          sql.NullInt64
		fairPass, fairLow   sql.NullFloat64
		partRateName        sql.NullString
		partRate            rateRead
	)
	err := s.db.QueryRowContext(ctx, s.wq.why, id).Scan(&status, &kind, &queue, &key, &later, &dueAt, &lapsed, &now, &pausedAt,
		&kindMax, &kindLive, &kindRoom, &queueMax, &queueLive, &queueRoom, &headID, &headStatus, &ahead,
		&partition, &partName, &partMax, &partLive,
		&cost, &kindRate.max, &kindRate.per, &kindRate.recent, &kindRate.room, &kindRate.next,
		&queueRate.max, &queueRate.per, &queueRate.recent, &queueRate.room, &queueRate.next,
		&fairWeight, &fairPass, &fairLow,
		&partRateName, &partRate.max, &partRate.per, &partRate.recent, &partRate.room, &partRate.next)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("lease: why row %d is not running: %w", id, errprefix.Trim("lease: ", ErrNotFound))
	}
	if err != nil {
		return nil, s.wrapErr(fmt.Sprintf("why row %d is not running", id), err)
	}
	reasons := []Reason{}
	st := leasework.Status(status)
	idle := st == leasework.StatusReady || st == leasework.StatusWaiting ||
		(st == leasework.StatusInProgress && lapsed.Valid && lapsed.Bool)
	if idle && pausedAt.Valid {
		reasons = append(reasons, Reason{Kind: ReasonPaused, Queue: queue, PausedAt: pausedAt.Time,
			Text: fmt.Sprintf("queue %s is paused (since %s): none of its events is claimed until it is resumed",
				queue, formatReasonTime(pausedAt.Time))})
	}
	// A WAITING row without a key waits for no key: a partition limit
	// set it aside.
	setAside := st == leasework.StatusWaiting && key == "" && partition != ""
	part := Reason{Kind: ReasonPartition, Partition: partition, SetAside: setAside}
	if partMax.Valid {
		part.Limit = Limit{Scope: ScopePartition, Name: partName.String, Max: int(partMax.Int64)}
		part.Live = int(partLive.Int64)
	}
	part.Text = partitionText(part)
	if st == leasework.StatusWaiting && key != "" {
		r := Reason{Kind: ReasonKey, Key: key, Ahead: int(ahead.Int64)}
		if headID.Valid {
			r.HeadID, r.HeadStatus = headID.Int64, leasework.Status(headStatus.String)
		}
		r.Text = keyText(r)
		reasons = append(reasons, r)
	}
	rate := rates{kind: kind, queue: queue, partition: partition, cost: cost, now: now,
		kindRate: kindRate, queueRate: queueRate, partRate: partRate, partName: partRateName.String}
	if setAside {
		// Set aside by the partition's rate limit, its concurrency limit,
		// or both; by a limit cleared since when neither holds it now.
		held := rate.reasons(true)
		if len(held) == 0 || (partMax.Valid && part.Live >= part.Limit.Max) || (!partMax.Valid && !partRate.max.Valid) {
			reasons = append(reasons, part)
		}
		return append(reasons, held...), nil
	}
	if st == leasework.StatusInProgress {
		// A lease that ran out is taken back by a claim: a start.
		return append(reasons, rate.reasons(false)...), nil
	}
	if st != leasework.StatusReady {
		return reasons, nil
	}
	if later {
		r := Reason{Kind: ReasonNotDue}
		if dueAt.Valid {
			r.DueAt, r.DueIn = dueAt.Time, dueAt.Time.Sub(now)
			r.Text = fmt.Sprintf("not due until %s (in %s, by the database clock)", formatReasonTime(r.DueAt), formatWait(r.DueIn))
		} else {
			r.Text = "not due ever: its due time is infinity, which the schema refuses since migration 10; cancel it, or set its due time"
		}
		return append(reasons, r), nil
	}
	for _, l := range []struct {
		scope, name      string
		most, live, room sql.NullInt64
	}{
		{ScopeKind, kind, kindMax, kindLive, kindRoom},
		{ScopeQueue, queue, queueMax, queueLive, queueRoom},
	} {
		if !l.most.Valid || l.room.Int64 > 0 {
			continue
		}
		r := Reason{Kind: ReasonLimit, Limit: Limit{Scope: l.scope, Name: l.name, Max: int(l.most.Int64)}, Live: int(l.live.Int64)}
		r.Text = limitText(r)
		reasons = append(reasons, r)
	}
	if partMax.Valid && part.Live >= part.Limit.Max {
		reasons = append(reasons, part)
	}
	reasons = append(reasons, rate.reasons(false)...)
	if r, ok := fairReason(queue, partition, fairWeight, fairPass, fairLow); ok {
		reasons = append(reasons, r)
	}
	return reasons, nil
}

// fairReason is the ReasonFair of a due READY row of queue and partition,
// from whySQL's reads: the weight of its partition (NULL when the queue
// is not fair), its partition's pass (NULL when fair scheduling does not
// serve it) and the queue's lowest (NULL when it serves none). ok is
// false when fairness keeps the row from nothing: the queue is not fair,
// its partition is level with the one furthest behind (less than a row
// ahead), or not served yet (the next claim brings it in at the lowest
// pass), or, for a row without a partition, no partition is served.
func fairReason(queue, partition string, weight sql.NullInt64, pass, low sql.NullFloat64) (Reason, bool) {
	if !weight.Valid || !low.Valid {
		return Reason{}, false
	}
	if partition == "" {
		return Reason{Kind: ReasonFair, Queue: queue,
			Text: fmt.Sprintf("has no partition in fair queue %s: it is taken in the queue's order, behind the partitions served by weight, when it is among the queue's oldest due events", queue)}, true
	}
	if !pass.Valid {
		return Reason{}, false
	}
	ahead := math.Round((pass.Float64 - low.Float64) * float64(weight.Int64))
	if ahead < 1 {
		return Reason{}, false
	}
	r := Reason{Kind: ReasonFair, Queue: queue, Partition: partition, Weight: int(weight.Int64), Ahead: int(min(ahead, math.MaxInt32))}
	rows := "rows"
	if r.Ahead == 1 {
		rows = "row"
	}
	r.Text = fmt.Sprintf("waits its turn in fair queue %s: partition %s (weight %d) is %d %s ahead of the partition furthest behind", queue, partition, r.Weight, r.Ahead, rows)
	return r, true
}

// rateRead is a rate limit of a row as whySQL reads it: all NULL when
// there is none.
type rateRead struct {
	max, per, recent, room sql.NullInt64
	next                   sql.NullTime
}

// rates are the rate limits over a row of kind, queue and partition that
// costs cost starts, at the database's now, as whySQL reads them: its
// partition's (partName: the partition's own, or "" for the default).
type rates struct {
	kind, queue, partition        string
	cost                          int
	now                           time.Time
	kindRate, queueRate, partRate rateRead
	partName                      string
}

// reasons are the ReasonRate of the row: its kind's rate limit, then its
// queue's, then its partition's, each when it has less room than the
// row's cost; its partition's alone when partOnly (a row set aside, which
// the kind's and queue's limits did not hold back).
func (x rates) reasons(partOnly bool) []Reason {
	var out []Reason
	for _, l := range []struct {
		scope, name string
		rateRead
	}{{ScopeKind, x.kind, x.kindRate}, {ScopeQueue, x.queue, x.queueRate}, {ScopePartition, x.partName, x.partRate}} {
		if !l.max.Valid || l.room.Int64 >= int64(x.cost) || (partOnly && l.scope != ScopePartition) {
			continue
		}
		r := Reason{Kind: ReasonRate, Cost: x.cost, Recent: int(l.recent.Int64),
			Rate: RateLimit{Scope: l.scope, Name: l.name, Max: int(l.max.Int64), Per: time.Duration(l.per.Int64) * time.Microsecond}}
		if l.scope == ScopePartition {
			r.Partition, r.SetAside = x.partition, partOnly
		}
		if l.next.Valid {
			r.NextAt, r.NextIn = l.next.Time, max(l.next.Time.Sub(x.now), 0)
		}
		r.Text = rateText(r)
		out = append(out, r)
	}
	return out
}

// rateText is the sentence of a ReasonRate.
func rateText(r Reason) string {
	head := fmt.Sprintf("held by rate limit %s:%s (%d/%d starts per %v)", r.Rate.Scope, r.Rate.Name, r.Recent, r.Rate.Max, r.Rate.Per)
	if r.Rate.Scope == ScopePartition && r.Rate.Name == "" {
		head = fmt.Sprintf("held by rate limit partition default (%d/%d starts per %v in partition %s)", r.Recent, r.Rate.Max, r.Rate.Per, r.Partition)
	}
	when := fmt.Sprintf("%s (in %s, by the database clock)", formatReasonTime(r.NextAt), formatWait(r.NextIn))
	switch {
	case r.Cost > r.Rate.Max:
		return fmt.Sprintf("%s: it costs %d starts, more than the limit allows in a window, so it never starts until the limit is raised or cleared", head, r.Cost)
	case r.NextAt.IsZero():
		// Not read (a limit's shares whose caps do not add up to its
		// Max): say what is sure.
		return head + ": it starts when the window has room, or the limit is raised or cleared"
	case r.Cost > 1:
		return fmt.Sprintf("%s: it costs %d starts, which the window has room for at %s, unless other events take it first; or when the limit is raised or cleared", head, r.Cost, when)
	}
	return fmt.Sprintf("%s: the next start is allowed at %s; or when the limit is raised or cleared", head, when)
}

// partitionText is the sentence of a ReasonPartition.
func partitionText(r Reason) string {
	if r.Limit.Scope == "" {
		return fmt.Sprintf("set aside by a concurrency limit of partition %s, cleared since: the next claims bring it back READY", r.Partition)
	}
	name := fmt.Sprintf("partition:%s (%d/%d live)", r.Partition, r.Live, r.Limit.Max)
	if r.Limit.Name == "" {
		name = fmt.Sprintf("partition default (%d/%d live in partition %s)", r.Live, r.Limit.Max, r.Partition)
	}
	if r.Live < r.Limit.Max {
		return "set aside by concurrency limit " + name + " while it was full: it has room now, and the next claims take it or bring it back READY"
	}
	head := "held by concurrency limit " + name
	if r.SetAside {
		head += ", set aside (WAITING)"
	}
	return limitTail(head, r)
}

// limitText is the sentence of a ReasonLimit.
func limitText(r Reason) string {
	return limitTail(fmt.Sprintf("held by concurrency limit %s:%s (%d/%d live)", r.Limit.Scope, r.Limit.Name, r.Live, r.Limit.Max), r)
}

// limitTail ends the sentence head of a full limit (ReasonLimit,
// ReasonPartition) with what starts the row.
func limitTail(head string, r Reason) string {
	switch {
	case r.Limit.Max == 0:
		return head + ": the limit is 0, so none of its attempts starts until it is raised or cleared"
	case r.Live > r.Limit.Max:
		return head + ": the limit was lowered below the attempts that run; it starts once enough of them have ended, or the limit is raised or cleared"
	}
	return head + ": it starts when one of those attempts ends, or the limit is raised or cleared"
}

// keyText is the sentence of a ReasonKey.
func keyText(r Reason) string {
	s := fmt.Sprintf("waiting for key %q", r.Key)
	switch {
	case r.HeadID == 0:
		s += ", which has no live head just now: the key is passing to its next event"
	case r.HeadStatus == leasework.StatusFailed:
		s += fmt.Sprintf(", held by its head, event %d, FAILED: it holds the key until it is requeued or discarded", r.HeadID)
	default:
		s += fmt.Sprintf(": its head, event %d, is %s", r.HeadID, r.HeadStatus)
	}
	switch {
	case r.Ahead >= maxAhead:
		s += fmt.Sprintf("; at least %d more events wait before this one", maxAhead)
	case r.Ahead == 1:
		s += "; 1 more event waits before this one"
	case r.Ahead > 1:
		s += fmt.Sprintf("; %d more events wait before this one", r.Ahead)
	}
	return s
}

// formatReasonTime is a time in a reason's text: UTC, to the second.
func formatReasonTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// formatWait is a wait in a reason's text: to the second under two days,
// then in days and hours.
func formatWait(d time.Duration) string {
	switch {
	case d < time.Second:
		return "under a second"
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}
