package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/conformance"
	"github.com/leasework/leasework/lease"
)

// unsafeBaseline is the lab article's intentionally unsafe store, which
// TestBaselineSelfTest runs the lab's six tests against to prove that the
// suite fails where it should. Its claim selects only due READY rows, so a
// committed claim whose worker died is stranded forever; its completions
// and retries (lease.Complete, lease.Retry, and lease.Snooze, written as a
// plain retry) key on the row id alone, so a stale owner overwrites the
// claim that replaced it. Everything else is the real store's, which it
// embeds.
//
// Its claim reads only the queue it is asked for (the default queue when
// given none), so that the lab's tests mean on a table with queues what
// they meant before; it orders by id rather than by priority and ignores a
// pause, flaws that are not the lab's and that no lab test looks at.
//
// It is built on lease's public API only (the store's pool and its table's
// name) and lives in this package's tests, so that it never ships.
type unsafeBaseline struct {
	*lease.Store
	claimSQL, completeSQL, retrySQL string
}

// The lab's statements; {{table}} is the store's quoted table name.
const (
	// $1 limit, $2 kinds (empty for every kind), $3 lease in microseconds,
	// $4 worker, $5 queue.
	baselineClaimSQL = `
WITH candidate AS (
    SELECT id FROM {{table}}
    WHERE queue = $5 AND status = 'READY' AND next_attempt_at <= statement_timestamp()
      AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS o
SET status = 'INPROGRESS', generation = o.generation + 1, attempt = o.attempt + 1,
    lease_until = statement_timestamp() + $3 * interval '1 microsecond',
    worker = NULLIF($4, ''), updated_at = statement_timestamp()
WHERE o.id = ANY (ARRAY(SELECT id FROM candidate))
RETURNING o.id, o.event_id, o.kind, COALESCE(o.key, ''), o.payload, o.generation,
    o.attempt, o.max_attempts, o.lease_until, o.progress, COALESCE(o.last_error, ''),
    o.queue, o.priority`

	// $1 ids.
	baselineCompleteSQL = `
UPDATE {{table}} AS o
SET status = 'DONE', lease_until = NULL, finished_at = statement_timestamp()
WHERE o.id = ANY ($1::bigint[])
RETURNING o.id, o.status`

	// $1 ids, $2 delays in microseconds, $3 error texts.
	baselineRetrySQL = `
UPDATE {{table}} AS o
SET status = 'READY', lease_until = NULL, last_error = r.error,
    next_attempt_at = statement_timestamp() + r.delay * interval '1 microsecond'
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r(id, delay, error)
WHERE o.id = r.id
RETURNING o.id, o.status`
)

var _ conformance.Store = (*unsafeBaseline)(nil)

// newBaseline is the Target.NewStore of the suite's run against the baseline.
func newBaseline(db *sql.DB, drv leasework.Driver, opts lease.Options) (conformance.Store, error) {
	s, err := lease.New(db, drv, opts)
	if err != nil {
		return nil, err
	}
	table := func(q string) string { return strings.ReplaceAll(q, "{{table}}", s.QualifiedTable()) }
	return &unsafeBaseline{
		Store:       s,
		claimSQL:    table(baselineClaimSQL),
		completeSQL: table(baselineCompleteSQL),
		retrySQL:    table(baselineRetrySQL),
	}, nil
}

// querier is *sql.DB or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Claim claims due READY rows only.
func (b *unsafeBaseline) Claim(ctx context.Context, req lease.ClaimRequest) ([]leasework.Claim, error) {
	return b.claim(ctx, b.DB(), req)
}

// ClaimTx is Claim inside tx.
func (b *unsafeBaseline) ClaimTx(ctx context.Context, tx *sql.Tx, req lease.ClaimRequest) ([]leasework.Claim, error) {
	if tx == nil {
		return nil, errors.New("baseline: claim: tx is nil")
	}
	return b.claim(ctx, tx, req)
}

func (b *unsafeBaseline) claim(ctx context.Context, q querier, req lease.ClaimRequest) ([]leasework.Claim, error) {
	kinds := req.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	queue := req.Queue
	if queue == "" {
		queue = lease.DefaultQueue
	}
	rows, err := q.QueryContext(ctx, b.claimSQL,
		req.Limit, b.Driver().Array(kinds), req.Lease.Microseconds(), req.Worker, queue)
	if err != nil {
		return nil, fmt.Errorf("baseline: claim: %w", err)
	}
	defer rows.Close()
	var claims []leasework.Claim
	for rows.Next() {
		var c leasework.Claim
		if err := rows.Scan(&c.ID, &c.EventID, &c.Kind, &c.Key, &c.Payload, &c.Generation,
			&c.Attempt, &c.MaxAttempts, &c.LeaseUntil, &c.Progress, &c.LastError,
			&c.Queue, &c.Priority); err != nil {
			return nil, fmt.Errorf("baseline: claim: %w", err)
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("baseline: claim: %w", err)
	}
	return claims, nil
}

// Write is WriteMany of one write, as the real store's is: the embedded
// store's Write would make it with the real WriteMany, not the baseline's.
func (b *unsafeBaseline) Write(ctx context.Context, w lease.Write) (lease.Result, error) {
	res, err := b.WriteMany(ctx, w)
	if err != nil {
		return lease.Result{Op: w.Op(), Ref: w.Ref()}, err
	}
	return res[0], res[0].Err
}

// WriteMany marks rows DONE (lease.Complete) and sends them back to READY
// (lease.Retry, and lease.Snooze, written as a plain retry) by id alone;
// every other op is the real store's, written first. A write no statement
// can make is refused before anything is written: a negative delay here,
// the others by the real store.
func (b *unsafeBaseline) WriteMany(ctx context.Context, writes ...lease.Write) ([]lease.Result, error) {
	var completes, retries, others []int
	var rest []lease.Write
	for i, w := range writes {
		switch w.Op() {
		case lease.OpComplete:
			completes = append(completes, i)
		case lease.OpRetry, lease.OpSnooze:
			if w.Delay() < 0 {
				return nil, fmt.Errorf("baseline: %s: row %d generation %d: Delay is %v; it must not be negative", w.Op(), w.Ref().ID, w.Ref().Generation, w.Delay())
			}
			retries = append(retries, i)
		default:
			others = append(others, i)
			rest = append(rest, w)
		}
	}
	out := make([]lease.Result, len(writes))
	for i, w := range writes {
		out[i] = lease.Result{Op: w.Op(), Ref: w.Ref()}
	}
	if len(rest) > 0 {
		res, err := b.Store.WriteMany(ctx, rest...)
		if err != nil {
			return nil, err
		}
		for j, i := range others {
			out[i] = res[j]
		}
	}
	drv := b.Driver()
	if len(completes) > 0 {
		ids := make([]int64, len(completes))
		for j, i := range completes {
			ids[j] = writes[i].Ref().ID
		}
		b.write(ctx, writes, completes, out, b.completeSQL, drv.Array(ids))
	}
	if len(retries) > 0 {
		ids, delays, texts := make([]int64, len(retries)), make([]int64, len(retries)), make([]string, len(retries))
		for j, i := range retries {
			w := writes[i]
			ids[j], delays[j] = w.Ref().ID, w.Delay().Microseconds()
			texts[j] = lease.CleanText(w.Text(), lease.MaxErrorBytes)
		}
		b.write(ctx, writes, retries, out, b.retrySQL, drv.Array(ids), drv.Array(delays), drv.Array(texts))
	}
	return out, nil
}

// write runs an outcome statement keyed by id alone for the writes group
// names (indexes into writes and out, all of one statement), and sets each
// one's result as the real store does: an updated row is accepted whatever
// its generation (the baseline's flaw); a row that no longer exists is
// gone; a failed statement is no answer for all of them.
func (b *unsafeBaseline) write(ctx context.Context, writes []lease.Write, group []int, out []lease.Result, query string, args ...any) {
	status, err := b.run(ctx, query, args...)
	for _, i := range group {
		w, r := writes[i], &out[i]
		if err != nil {
			r.Verdict, r.Err = lease.VerdictNoAnswer, fmt.Errorf("baseline: %s: %w", w.Op(), err)
			continue
		}
		if s, ok := status[w.Ref().ID]; ok {
			r.Verdict, r.Status = lease.VerdictAccepted, s
			continue
		}
		r.Verdict = lease.VerdictGone
		r.Err = fmt.Errorf("baseline: %s row %d generation %d: the row no longer exists: %w",
			w.Op(), w.Ref().ID, w.Ref().Generation, leasework.ErrLeaseLost)
	}
}

// run runs query and returns the status of each row it returned, by id.
func (b *unsafeBaseline) run(ctx context.Context, query string, args ...any) (map[int64]leasework.Status, error) {
	rows, err := b.DB().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	status := map[int64]leasework.Status{}
	for rows.Next() {
		var id int64
		var s leasework.Status
		if err := rows.Scan(&id, &s); err != nil {
			return nil, err
		}
		status[id] = s
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return status, nil
}
