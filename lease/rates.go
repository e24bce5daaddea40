package lease

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxRateStarts is the most starts a rate limit may allow in its period.
const MaxRateStarts = 10000

// The shortest and the longest period of a rate limit.
const (
	MinRatePeriod = time.Millisecond
	MaxRatePeriod = 24 * time.Hour
)

// MaxCost is the largest cost an event may have under rate limits.
const MaxCost = 1000

// RateLimit is a rate limit: at most Max attempt starts of its kind, its
// queue or its partition in any window of length Per, across every worker. An attempt
// starts when a claim takes its row (a first attempt, a retry, or an
// expired lease taken back) and takes as many starts as its event's
// [Event].Cost (1 by default). Nothing gives a start back: an attempt that
// ends at once, fails, or is released has started. A due row that a full
// rate limit holds back stays READY, and is claimed once the window
// allows; a worker with nothing else to claim sleeps until then
// ([Store.NextWake]). An event whose cost is more than Max never starts;
// claims pass over it, and take the events behind it.
//
// A rate limit of [ScopePartition] holds each partition ([Event].Partition)
// to its Max per Per: the partition's own limit, else the default (Name
// empty); a partition under neither is not limited. As under a partition's
// concurrency limit ([Limit]), the due rows it holds back are set aside
// (WAITING, without a key) where the claim does not read them, and are
// READY again once the window has room for them: a backlog behind a
// partition at its rate costs claims nothing.
type RateLimit struct {
	// Scope is [ScopeKind], [ScopeQueue] or [ScopePartition].
	Scope string
	// Name is the kind's or the queue's name, or the partition's: empty
	// for the default of every partition.
	Name string
	// Max is the most starts in any window of Per, from 1 to
	// [MaxRateStarts].
	Max int
	// Per is the window, from [MinRatePeriod] to [MaxRatePeriod], in
	// whole microseconds.
	Per time.Duration
}

// RateLimitInfo is a rate limit as [Store.RateLimits] reads it.
type RateLimitInfo struct {
	RateLimit
	// Recent is how many starts it counts in the window that ends now.
	// For a partition's limit, those of its partition; for the default
	// partition limit, those of every partition under it (each is held to
	// Max on its own).
	Recent int
	// HeldBack is, for a partition's rate limit, the rows its partition
	// has set aside (WAITING without a key), or every partition under the
	// default; whatever holds them (a partition's concurrency limit too).
	// Zero for a kind's or a queue's limit, whose rows held back stay
	// READY.
	HeldBack int64
	// NextAt is when it next has room for a start while it is full, by the
	// database clock; zero while it has room. For the default partition
	// limit, zero.
	NextAt time.Time
	// SetAt is when the limit was last set, by the database clock; SetBy
	// who set it, as the caller of [Store.SetRateLimit] said.
	SetAt time.Time
	SetBy string
}

// setRateLimitSQL declares or changes rate limit ($1, $2) to $3 starts
// per $4 microseconds, set by $5, with the change in the audit; rateSharesSQL
// then gives its 16 shares their caps. The starts a share holds are kept:
// a share past a lowered cap admits no one until enough of them leave the
// window.
const setRateLimitSQL = `
WITH old AS (
    SELECT max_starts, period_us FROM {{schema}}.{{name "rate_limits"}} WHERE scope = $1 AND name = $2 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "rate_limits"}} AS l (scope, name, max_starts, period_us, set_by) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (scope, name) DO UPDATE
    SET max_starts = EXCLUDED.max_starts, period_us = EXCLUDED.period_us, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING l.id
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by, period_us)
    SELECT 'rate:' || $1, $2, (SELECT max_starts FROM old), $3, $5, $4 FROM set
)
SELECT (SELECT max_starts FROM old), (SELECT period_us FROM old), (SELECT id FROM set)`

// rateSharesSQL gives the 16 shares of rate limit $1 their caps of $2
// starts, as sharesSQL does a concurrency limit's slots.
const rateSharesSQL = `
INSERT INTO {{schema}}.{{name "rate_shares"}} AS s (key, limit_id, share, cap)
SELECT $1::bigint * 100000 + g, $1, g, $2::integer / ` + limitSlots + ` + (g < $2::integer % ` + limitSlots + `)::integer
FROM generate_series(0, ` + limitSlots + ` - 1) AS g
ON CONFLICT (key) DO UPDATE SET cap = EXCLUDED.cap`

// clearRateLimitSQL removes rate limit ($1, $2), its shares with it, and
// writes the change in the audit, by $3; idle workers are woken on the
// table's channel ($4).
const clearRateLimitSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "rate_limits"}} WHERE scope = $1 AND name = $2 RETURNING max_starts, period_us
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by, period_us)
    SELECT 'rate:' || $1, $2, max_starts, NULL, $3, period_us FROM gone
)
SELECT count(*) FROM gone, pg_notify($4, '')`

// rateLimitsSQL reads every rate limit with its starts in the window that
// ends now and, while it is full, when a share next has room: the oldest
// start in a share's window leaves it a period after it was made.
const rateLimitsSQL = `
SELECT l.scope, l.name, l.max_starts, l.period_us, l.set_at, l.set_by, w.recent,
    CASE WHEN w.room = 0 THEN w.next_at END
FROM {{schema}}.{{name "rate_limits"}} AS l
CROSS JOIN LATERAL (
    SELECT COALESCE(sum(x.recent), 0)::integer AS recent, COALESCE(sum(GREATEST(s.cap - x.recent, 0)), 0) AS room,
        min(x.oldest) + l.period_us * interval '1 microsecond' AS next_at
    FROM {{schema}}.{{name "rate_shares"}} AS s
    CROSS JOIN LATERAL (
        SELECT count(*) AS recent, min(t) AS oldest FROM unnest(s.starts) AS t
        WHERE t > statement_timestamp() - l.period_us * interval '1 microsecond') AS x
    WHERE s.key BETWEEN l.id::bigint * 100000 AND l.id::bigint * 100000 + ` + limitSlots + ` - 1) AS w
ORDER BY l.scope, l.name`

// setPartitionRateSQL declares or changes the rate limit of partition $1
// (” for the default) to $2 starts per $3 microseconds, set by $4, with
// the change in the audit. Every slot the change may give room (the
// partition's, or every slot for the default) gets a release of n = 0,
// "look again", as setPartitionLimitSQL does; idle workers are woken on
// the table's channel ($5). A slot keeps the starts it counted: a lowered
// Max admits no one until enough of them leave the window.
const setPartitionRateSQL = `
WITH old AS (
    SELECT max_starts, period_us FROM {{schema}}.{{name "partition_rates"}} WHERE partition = $1 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "partition_rates"}} AS l (partition, max_starts, period_us, set_by) VALUES ($1, $2, $3, $4)
    ON CONFLICT (partition) DO UPDATE
    SET max_starts = EXCLUDED.max_starts, period_us = EXCLUDED.period_us, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING l.partition
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by, period_us)
    SELECT 'rate:partition', $1, (SELECT max_starts FROM old), $2, $4, $3 FROM set
), look AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT s.id, 0 FROM {{schema}}.{{name "partition_slots"}} AS s
    WHERE s.partition = $1 OR $1 = ''
)
SELECT (SELECT max_starts FROM old), (SELECT period_us FROM old) FROM pg_notify($5, '')`

// clearPartitionRateSQL removes the rate limit of partition $1 (” for the
// default), written to the audit as set by $2, with a release of n = 0 for
// every slot it may change: a partition left under no limit has its slot
// removed, and its rows set aside READY again, by the claims that count
// them. Idle workers are woken on the table's channel ($3).
const clearPartitionRateSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "partition_rates"}} WHERE partition = $1 RETURNING max_starts, period_us
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, set_by, period_us)
    SELECT 'rate:partition', $1, max_starts, NULL, $2, period_us FROM gone
), look AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT s.id, 0 FROM {{schema}}.{{name "partition_slots"}} AS s
    WHERE (s.partition = $1 OR $1 = '') AND EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) FROM gone, pg_notify($3, '')`

// partitionRatesSQL reads the partition rate limits, after the others:
// each with the starts its partition's slot counts in the window that ends
// now (the default: of every slot of a partition without its own) and,
// for a partition's own limit while it is full, when it next has room; and
// the rows its partitions set aside, through their index. It reads every
// slot once, and the rows set aside once.
const partitionRatesSQL = `
WITH aside AS MATERIALIZED (
    SELECT a.partition_key AS partition, count(*) AS n FROM {{table}} AS a
    WHERE a.status = 'WAITING' AND a.key IS NULL
    GROUP BY a.partition_key
), own AS (
    SELECT partition FROM {{schema}}.{{name "partition_rates"}} WHERE partition <> ''
), recent AS MATERIALIZED (
    SELECT s.partition, x.recent, x.oldest
    FROM {{schema}}.{{name "partition_slots"}} AS s
    CROSS JOIN LATERAL (
        SELECT l.period_us * interval '1 microsecond' AS period FROM {{schema}}.{{name "partition_rates"}} AS l
        WHERE l.partition IN (s.partition, '')
        ORDER BY l.partition = ''
        LIMIT 1) AS l
    CROSS JOIN LATERAL (
        SELECT count(*) AS recent, min(t) + l.period AS oldest FROM unnest(s.starts) AS t
        WHERE t > statement_timestamp() - l.period) AS x
)
SELECT 'partition', l.partition, l.max_starts, l.period_us, l.set_at, l.set_by,
    CASE WHEN l.partition = '' THEN (SELECT COALESCE(sum(r.recent), 0) FROM recent AS r WHERE r.partition NOT IN (SELECT partition FROM own))
         ELSE (SELECT COALESCE(sum(r.recent), 0) FROM recent AS r WHERE r.partition = l.partition) END::integer,
    CASE WHEN l.partition <> '' THEN (SELECT r.oldest FROM recent AS r WHERE r.partition = l.partition AND r.recent >= l.max_starts) END,
    CASE WHEN l.partition = '' THEN (SELECT COALESCE(sum(a.n), 0) FROM aside AS a WHERE a.partition NOT IN (SELECT partition FROM own))
         ELSE (SELECT COALESCE(sum(a.n), 0) FROM aside AS a WHERE a.partition = l.partition) END::bigint
FROM {{schema}}.{{name "partition_rates"}} AS l
ORDER BY l.partition`

// String is the limit's rate as [ParseRate] reads it: "100/1m0s".
func (l RateLimit) String() string { return fmt.Sprintf("%d/%v", l.Max, l.Per) }

// ParseRate reads a rate as an operator writes it, "M/PERIOD": at most M
// starts in any window of PERIOD, a Go duration ("100/1m", "5/500ms",
// "2000/24h"), or a unit alone for one of it ("100/s", "100/m",
// "100/h"). It checks M and PERIOD as [Store.SetRateLimit] does.
func ParseRate(s string) (max int, per time.Duration, err error) {
	m, p, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("lease: rate %q: write it as M/PERIOD, at most M starts in any window of PERIOD: 100/1m, 5/500ms", s)
	}
	max, err = strconv.Atoi(strings.TrimSpace(m))
	if err != nil {
		return 0, 0, fmt.Errorf("lease: rate %q: %q is not a whole number of starts", s, m)
	}
	p = strings.TrimSpace(p)
	if p != "" && !strings.ContainsAny(p, "0123456789") {
		p = "1" + p // a unit alone: one of it
	}
	per, err = time.ParseDuration(p)
	if err != nil {
		return 0, 0, fmt.Errorf("lease: rate %q: the period %q is not a duration such as 1m, 30s or 500ms", s, p)
	}
	switch {
	case max < 1 || max > MaxRateStarts:
		return 0, 0, fmt.Errorf("lease: rate %q: %d starts; it must be from 1 to %d", s, max, MaxRateStarts)
	case per < MinRatePeriod || per > MaxRatePeriod || per%time.Microsecond != 0:
		return 0, 0, fmt.Errorf("lease: rate %q: a period of %v; it must be from %v to %v, in whole microseconds", s, per, MinRatePeriod, MaxRatePeriod)
	}
	return max, per, nil
}

// checkRateLimit checks a rate limit before anything is sent.
func checkRateLimit(op string, l RateLimit) error {
	if err := checkLimitName(op, l.Scope, l.Name); err != nil {
		return err
	}
	if l.Max < 1 || l.Max > MaxRateStarts {
		return fmt.Errorf("lease: %s: Max is %d; it must be between 1 and %d", op, l.Max, MaxRateStarts)
	}
	if l.Per < MinRatePeriod || l.Per > MaxRatePeriod || l.Per%time.Microsecond != 0 {
		return fmt.Errorf("lease: %s: Per is %v; it must be between %v and %v, in whole microseconds", op, l.Per, MinRatePeriod, MaxRatePeriod)
	}
	return nil
}

// SetRateLimit declares rate limit l, or changes it, across every worker
// of the table: claims that begin after it returns keep it. by names who
// set it, for the audit ([Store.LimitChanges], where its scope reads
// "rate:kind", "rate:queue" or "rate:partition"). It reports the limit it
// replaced, and whether there was one.
//
// The starts already counted stay counted: a lowered Max admits no one
// until enough of them leave the window, and a changed Per applies to
// them at once.
func (s *Store) SetRateLimit(ctx context.Context, l RateLimit, by string) (old RateLimit, had bool, err error) {
	if err := checkRateLimit("set rate limit", l); err != nil {
		return RateLimit{}, false, err
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return RateLimit{}, false, fmt.Errorf("lease: set rate limit: %w", err)
	}
	if l.Scope == ScopePartition {
		var wasMax, wasPer sql.NullInt64
		if err := s.db.QueryRowContext(ctx, s.q.setPartitionRate, l.Name, l.Max, l.Per.Microseconds(), by, s.channel).Scan(&wasMax, &wasPer); err != nil {
			return RateLimit{}, false, s.wrapErr("set rate limit", err)
		}
		if !wasMax.Valid {
			return RateLimit{}, false, nil
		}
		return RateLimit{Scope: l.Scope, Name: l.Name, Max: int(wasMax.Int64), Per: time.Duration(wasPer.Int64) * time.Microsecond}, true, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return RateLimit{}, false, s.wrapErr("set rate limit", err)
	}
	defer tx.Rollback()
	var wasMax, wasPer sql.NullInt64
	var id int64
	if err := tx.QueryRowContext(ctx, s.q.setRateLimit, l.Scope, l.Name, l.Max, l.Per.Microseconds(), by).Scan(&wasMax, &wasPer, &id); err != nil {
		return RateLimit{}, false, s.wrapErr("set rate limit", err)
	}
	if _, err := tx.ExecContext(ctx, s.q.rateShares, id, l.Max); err != nil {
		return RateLimit{}, false, s.wrapErr("set rate limit", err)
	}
	if err := tx.Commit(); err != nil {
		return RateLimit{}, false, s.wrapErr("set rate limit", err)
	}
	if !wasMax.Valid {
		return RateLimit{}, false, nil
	}
	return RateLimit{Scope: l.Scope, Name: l.Name, Max: int(wasMax.Int64), Per: time.Duration(wasPer.Int64) * time.Microsecond}, true, nil
}

// ClearRateLimit removes the rate limit of scope and name, written to the
// audit as set by by, and reports whether there was one. Idle workers are
// woken to claim what it held back.
func (s *Store) ClearRateLimit(ctx context.Context, scope, name, by string) (bool, error) {
	if err := checkLimitName("clear rate limit", scope, name); err != nil {
		return false, err
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return false, fmt.Errorf("lease: clear rate limit: %w", err)
	}
	var row *sql.Row
	if scope == ScopePartition {
		row = s.db.QueryRowContext(ctx, s.q.clearPartitionRate, name, by, s.channel)
	} else {
		row = s.db.QueryRowContext(ctx, s.q.clearRateLimit, scope, name, by, s.channel)
	}
	var n int
	if err := row.Scan(&n); err != nil {
		return false, s.wrapErr("clear rate limit", err)
	}
	return n > 0, nil
}

// RateLimits returns every rate limit declared, by scope and name (those
// of kinds and queues, then those of partitions), with its starts in the
// window that ends now and, while it is full, when it next has room. It
// reads every kind's and queue's limit's 16 shares, and every partition's
// slot.
func (s *Store) RateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	out, err := s.readRateLimits(ctx, nil, s.q.rateLimits, false)
	if err != nil {
		return nil, err
	}
	return s.readRateLimits(ctx, out, s.q.partitionRates, true)
}

// readRateLimits appends to out the rate limits query q reads; those of
// partitions (parts) with their rows set aside.
func (s *Store) readRateLimits(ctx context.Context, out []RateLimitInfo, q string, parts bool) ([]RateLimitInfo, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, s.wrapErr("rate limits", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l RateLimitInfo
		var per int64
		var next sql.NullTime
		dest := []any{&l.Scope, &l.Name, &l.Max, &per, &l.SetAt, &l.SetBy, &l.Recent, &next}
		if parts {
			dest = append(dest, &l.HeldBack)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, s.wrapErr("rate limits", err)
		}
		l.Per = time.Duration(per) * time.Microsecond
		if next.Valid {
			l.NextAt = next.Time
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("rate limits", err)
	}
	return out, nil
}
