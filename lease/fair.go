package lease

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// MaxWeight is the largest weight a partition may have under fair
// scheduling.
const MaxWeight = 1000

// The shortest and the longest wait of priority aging.
const (
	MinAgeAfter = time.Millisecond
	MaxAgeAfter = 365 * 24 * time.Hour
)

// Weight is a partition's weight in a fair queue. A queue is fair once its
// default weight (Partition empty) is set: within a priority level, its
// claims take its events across partitions ([Event].Partition) in
// proportion to their weights, the default for a partition not named.
// Scheduling is work-conserving: a partition with nothing due takes no
// share, and its share goes to those with work. A partition that had
// nothing due joins level with the partitions already served, neither
// behind their backlog nor ahead of it with credit saved while it was
// idle. See "Fair scheduling" in docs/flow-control.md.
type Weight struct {
	// Queue is the fair queue; empty means [DefaultQueue].
	Queue string
	// Partition is the partition weighed, or empty for the queue's
	// default.
	Partition string
	// Weight is from 1 to [MaxWeight].
	Weight int
}

// WeightInfo is a weight as [Store.Weights] reads it.
type WeightInfo struct {
	Weight
	// Active is, for a queue's default, how many of its partitions fair
	// scheduling serves now (those with due events claims have seen); for
	// a partition, whether it is one of them.
	Active int
	// SetAt is when the weight was last set, by the database clock; SetBy
	// who set it, as the caller of [Store.SetWeight] said.
	SetAt time.Time
	SetBy string
}

// setWeightSQL sets weight ($1 queue, $2 partition) to $3, set by $4,
// with the change in the audit and the weight as it was.
const setWeightSQL = `
WITH old AS (
    SELECT weight FROM {{schema}}.{{name "fair_weights"}} WHERE queue = $1 AND partition = $2 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "fair_weights"}} AS w (queue, partition, weight, set_by) VALUES ($1, $2, $3, $4)
    ON CONFLICT (queue, partition) DO UPDATE
    SET weight = EXCLUDED.weight, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING w.queue
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, partition, old_max, new_max, set_by)
    SELECT 'weight', $1, $2, (SELECT weight FROM old), $3, $4 FROM set
)
SELECT (SELECT weight FROM old)`

// clearWeightSQL removes weight ($1 queue, $2 partition), written to the
// audit as set by $3. Clearing a queue's default ends its fairness: its
// partitions leave fair_keys, and their arrivals go.
const clearWeightSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "fair_weights"}} WHERE queue = $1 AND partition = $2 RETURNING weight
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, partition, old_max, new_max, set_by)
    SELECT 'weight', $1, $2, weight, NULL, $3 FROM gone
), keys AS (
    DELETE FROM {{schema}}.{{name "fair_keys"}} WHERE queue = $1 AND $2 = '' AND EXISTS (SELECT 1 FROM gone)
), arrivals AS (
    DELETE FROM {{schema}}.{{name "fair_arrivals"}} WHERE queue = $1 AND $2 = '' AND EXISTS (SELECT 1 FROM gone)
), debts AS (
    DELETE FROM {{schema}}.{{name "fair_debts"}} WHERE queue = $1 AND $2 = '' AND EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) FROM gone`

// weightsSQL reads the weights, each with the partitions fair scheduling
// serves now.
const weightsSQL = `
SELECT w.queue, w.partition, w.weight, w.set_at, w.set_by,
    CASE WHEN w.partition = '' THEN (SELECT count(*) FROM {{schema}}.{{name "fair_keys"}} AS k WHERE k.queue = w.queue)
         ELSE (SELECT count(*) FROM {{schema}}.{{name "fair_keys"}} AS k WHERE k.queue = w.queue AND k.partition = w.partition) END
FROM {{schema}}.{{name "fair_weights"}} AS w
ORDER BY w.queue, w.partition`

// setAgingSQL sets queue $1's aging to $2 microseconds, set by $3, with
// the change in the audit (its Per) and the aging as it was.
const setAgingSQL = `
WITH old AS (
    SELECT after_us FROM {{schema}}.{{name "queue_aging"}} WHERE queue = $1 FOR UPDATE
), set AS (
    INSERT INTO {{schema}}.{{name "queue_aging"}} AS a (queue, after_us, set_by) VALUES ($1, $2, $3)
    ON CONFLICT (queue) DO UPDATE
    SET after_us = EXCLUDED.after_us, set_at = statement_timestamp(), set_by = EXCLUDED.set_by
    RETURNING a.queue
), audit AS (
    -- Old and New say whether the queue had an aging before and after:
    -- 1 or none.
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, period_us, set_by)
    SELECT 'aging', $1, (SELECT 1 FROM old), 1, $2, $3 FROM set
)
SELECT COALESCE((SELECT after_us FROM old), 0)`

// clearAgingSQL removes queue $1's aging, written to the audit as set by
// $2 with the aging it had.
const clearAgingSQL = `
WITH gone AS (
    DELETE FROM {{schema}}.{{name "queue_aging"}} WHERE queue = $1 RETURNING after_us
), audit AS (
    INSERT INTO {{schema}}.{{name "limit_changes"}} (scope, name, old_max, new_max, period_us, set_by)
    SELECT 'aging', $1, 1, NULL, after_us, $2 FROM gone
)
SELECT count(*) FROM gone`

// policySQL says whether queue $1 is fair or ages its rows, as the
// claim's policyCTE does.
const policySQL = `
SELECT EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_weights"}} AS w WHERE w.queue = $1 AND w.partition = '')
    OR EXISTS (SELECT 1 FROM {{schema}}.{{name "queue_aging"}} AS a WHERE a.queue = $1)`

// agingsSQL reads every queue's aging.
const agingsSQL = `
SELECT queue, after_us FROM {{schema}}.{{name "queue_aging"}} ORDER BY queue`

// checkWeightKey checks a weight's queue and partition, for op, and
// returns the queue named.
func checkWeightKey(op, queue, partition string) (string, error) {
	q, err := checkQueue(op, queue)
	if err != nil {
		return "", err
	}
	if err := validateText("Partition", partition, MaxPartitionBytes); err != nil {
		return "", fmt.Errorf("lease: %s: %w", op, err)
	}
	return q, nil
}

// SetWeight sets weight w, across every worker of the table: claims that
// begin after it returns keep it. Setting a queue's default (Partition
// empty) makes the queue fair. by names who set it, for the audit
// ([Store.LimitChanges], where its scope reads "weight" and its Partition
// names the partition). It reports the weight it replaced: 0 when there
// was none.
//
// Only workers and producers of a version that knows fair scheduling
// (migration 22) take part: upgrade them all before making a queue fair.
func (s *Store) SetWeight(ctx context.Context, w Weight, by string) (old int, err error) {
	q, err := checkWeightKey("set weight", w.Queue, w.Partition)
	if err != nil {
		return 0, err
	}
	if w.Weight < 1 || w.Weight > MaxWeight {
		return 0, fmt.Errorf("lease: set weight: Weight is %d; it must be between 1 and %d", w.Weight, MaxWeight)
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return 0, fmt.Errorf("lease: set weight: %w", err)
	}
	var was sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.fq.setWeight, q, w.Partition, w.Weight, by).Scan(&was); err != nil {
		return 0, s.wrapErr("set weight", err)
	}
	if w.Partition == "" {
		s.policies.Store(q, true)
	}
	return int(was.Int64), nil
}

// ClearWeight removes the weight of queue and partition, written to the
// audit as set by by, and reports whether there was one. Clearing a
// queue's default (partition empty) makes it a queue in plain order
// again; the weights of its partitions stay, unused until a default is
// set again.
func (s *Store) ClearWeight(ctx context.Context, queue, partition, by string) (bool, error) {
	q, err := checkWeightKey("clear weight", queue, partition)
	if err != nil {
		return false, err
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return false, fmt.Errorf("lease: clear weight: %w", err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.fq.clearWeight, q, partition, by).Scan(&n); err != nil {
		return false, s.wrapErr("clear weight", err)
	}
	return n > 0, nil
}

// Weights returns every weight set, by queue and partition (a queue's
// default first), each with the partitions fair scheduling serves now.
func (s *Store) Weights(ctx context.Context) ([]WeightInfo, error) {
	rows, err := s.db.QueryContext(ctx, s.fq.weights)
	if err != nil {
		return nil, s.wrapErr("weights", err)
	}
	defer rows.Close()
	var out []WeightInfo
	for rows.Next() {
		var w WeightInfo
		if err := rows.Scan(&w.Queue, &w.Partition, &w.Weight.Weight, &w.SetAt, &w.SetBy, &w.Active); err != nil {
			return nil, s.wrapErr("weights", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("weights", err)
	}
	return out, nil
}

// SetAging sets the priority aging of queue (empty means
// [DefaultQueue]): a due event that has waited longer than after since it
// became due is claimed as if its priority were one level higher (one
// less), so that a steady stream of higher-priority work cannot keep it
// waiting for good. It moves an event up one level, never more, and level
// 0 stays first. by names who set it, for the audit ([Store.LimitChanges],
// scope "aging", with Per the wait set). It reports the aging it replaced,
// zero for none.
func (s *Store) SetAging(ctx context.Context, queue string, after time.Duration, by string) (old time.Duration, err error) {
	q, err := checkQueue("set aging", queue)
	if err != nil {
		return 0, err
	}
	if after < MinAgeAfter || after > MaxAgeAfter || after%time.Microsecond != 0 {
		return 0, fmt.Errorf("lease: set aging: after is %v; it must be between %v and %v, in whole microseconds", after, MinAgeAfter, MaxAgeAfter)
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return 0, fmt.Errorf("lease: set aging: %w", err)
	}
	var was int64
	if err := s.db.QueryRowContext(ctx, s.fq.setAging, q, after.Microseconds(), by).Scan(&was); err != nil {
		return 0, s.wrapErr("set aging", err)
	}
	s.policies.Store(q, true)
	return time.Duration(was) * time.Microsecond, nil
}

// ClearAging removes the priority aging of queue, written to the audit as
// set by by, and reports whether it had one.
func (s *Store) ClearAging(ctx context.Context, queue, by string) (bool, error) {
	q, err := checkQueue("clear aging", queue)
	if err != nil {
		return false, err
	}
	if err := validateText("by", by, maxByBytes); err != nil {
		return false, fmt.Errorf("lease: clear aging: %w", err)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.fq.clearAging, q, by).Scan(&n); err != nil {
		return false, s.wrapErr("clear aging", err)
	}
	return n > 0, nil
}

// Agings returns the priority aging of every queue that has one.
func (s *Store) Agings(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := s.db.QueryContext(ctx, s.fq.agings)
	if err != nil {
		return nil, s.wrapErr("agings", err)
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var q string
		var us int64
		if err := rows.Scan(&q, &us); err != nil {
			return nil, s.wrapErr("agings", err)
		}
		out[q] = time.Duration(us) * time.Microsecond
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("agings", err)
	}
	return out, nil
}

// fairStatements are the rendered statements of fair scheduling and
// priority aging.
type fairStatements struct {
	setWeight, clearWeight, weights, setAging, clearAging, agings, policy string
}

func (s *Store) renderFair() fairStatements {
	return fairStatements{
		setWeight:   s.render(setWeightSQL),
		clearWeight: s.render(clearWeightSQL),
		weights:     s.render(weightsSQL),
		setAging:    s.render(setAgingSQL),
		clearAging:  s.render(clearAgingSQL),
		agings:      s.render(agingsSQL),
		policy:      s.render(policySQL),
	}
}
