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

// RateLimit is a rate limit: at most Max attempt starts of its kind or its
// queue in any window of length Per, across every worker. An attempt
// starts when a claim takes its row (a first attempt, a retry, or an
// expired lease taken back) and takes as many starts as its event's
// [Event].Cost (1 by default). Nothing gives a start back: an attempt that
// ends at once, fails, or is released has started. A due row that a full
// rate limit holds back stays READY, and is claimed once the window
// allows; a worker with nothing else to claim sleeps until then
// ([Store.NextWake]). An event whose cost is more than Max never starts;
// claims pass over it, and take the events behind it.
type RateLimit struct {
	// Scope is [ScopeKind] or [ScopeQueue].
	Scope string
	// Name is the kind's or the queue's name.
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
	Recent int
	// NextAt is when it next has room for a start while it is full, by the
	// database clock; zero while it has room.
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
	if l.Scope == ScopePartition {
		return fmt.Errorf("lease: %s: Scope is %q; a rate limit is of %q or %q", op, l.Scope, ScopeKind, ScopeQueue)
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
// "rate:kind" or "rate:queue"). It reports the limit it replaced, and
// whether there was one.
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
	if scope == ScopePartition {
		return false, fmt.Errorf("lease: clear rate limit: Scope is %q; a rate limit is of %q or %q", scope, ScopeKind, ScopeQueue)
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return false, fmt.Errorf("lease: clear rate limit: %w", err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.clearRateLimit, scope, name, by, s.channel).Scan(&n); err != nil {
		return false, s.wrapErr("clear rate limit", err)
	}
	return n > 0, nil
}

// RateLimits returns every rate limit declared, by scope and name, with its
// starts in the window that ends now and, while it is full, when it next
// has room. It reads every limit's 16 shares.
func (s *Store) RateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	rows, err := s.db.QueryContext(ctx, s.q.rateLimits)
	if err != nil {
		return nil, s.wrapErr("rate limits", err)
	}
	defer rows.Close()
	var out []RateLimitInfo
	for rows.Next() {
		var l RateLimitInfo
		var per int64
		var next sql.NullTime
		if err := rows.Scan(&l.Scope, &l.Name, &l.Max, &per, &l.SetAt, &l.SetBy, &l.Recent, &next); err != nil {
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
