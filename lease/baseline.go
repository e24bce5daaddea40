package lease

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasework/leasework"
)

// The lab article's intentionally unsafe baseline. Its claim selects only due
// READY rows, so a committed claim whose worker died is stranded forever;
// its complete and retry key on the row id alone, so a stale owner overwrites
// the claim that replaced it. Everything else is the safe Store's.

const baselineClaimSQL = `
WITH candidate AS (
    SELECT id FROM {{table}}
    WHERE status = 'READY' AND next_attempt_at <= statement_timestamp()
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
    o.attempt, o.max_attempts, o.lease_until, false, o.progress,
    COALESCE(o.last_error, '')`

const baselineCompleteSQL = `
UPDATE {{table}} AS o
SET status = 'DONE', lease_until = NULL, finished_at = statement_timestamp()
FROM unnest($1::bigint[], $2::bigint[]) AS r(id, generation)
WHERE o.id = r.id
RETURNING o.id, r.generation, o.status`

const baselineRetrySQL = `
UPDATE {{table}} AS o
SET status = 'READY', lease_until = NULL, last_error = r.error,
    next_attempt_at = statement_timestamp() + r.delay * interval '1 microsecond'
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[]) AS r(id, generation, delay, error)
WHERE o.id = r.id
RETURNING o.id, r.generation, o.status`

// UnsafeBaseline is the lab article's intentionally unsafe store, shipped so
// that the conformance suite can prove it fails where it should: claims see
// only due READY rows (an abandoned claim is stranded), and complete and retry
// are keyed by id alone (a stale owner overwrites the newer claim).
//
// Never use it for real work.
type UnsafeBaseline struct {
	*Store
	claimSQL, completeSQL, retrySQL string
}

// NewUnsafeBaseline returns the unsafe baseline over the table named by opts.
func NewUnsafeBaseline(db *sql.DB, drv leasework.Driver, opts Options) (*UnsafeBaseline, error) {
	s, err := New(db, drv, opts)
	if err != nil {
		return nil, err
	}
	return &UnsafeBaseline{
		Store:       s,
		claimSQL:    s.render(baselineClaimSQL),
		completeSQL: s.render(baselineCompleteSQL),
		retrySQL:    s.render(baselineRetrySQL),
	}, nil
}

// Claim claims due READY rows only.
func (b *UnsafeBaseline) Claim(ctx context.Context, req ClaimRequest) ([]leasework.Claim, error) {
	return b.scanClaims(ctx, b.db, b.claimSQL, req)
}

// ClaimTx is Claim inside tx.
func (b *UnsafeBaseline) ClaimTx(ctx context.Context, tx *sql.Tx, req ClaimRequest) ([]leasework.Claim, error) {
	if tx == nil {
		return nil, errors.New("lease: claim: tx is nil")
	}
	return b.scanClaims(ctx, tx, b.claimSQL, req)
}

// Complete marks the row DONE by id alone.
func (b *UnsafeBaseline) Complete(ctx context.Context, ref leasework.Ref) error {
	return single(b.CompleteMany(ctx, []leasework.Ref{ref}))
}

// CompleteMany marks rows DONE by id alone.
func (b *UnsafeBaseline) CompleteMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	ids, gens := splitRefs(refs)
	return b.guarded(ctx, "complete", refs, nil, b.completeSQL, b.drv.Array(ids), b.drv.Array(gens))
}

// Retry sends the row back to READY by id alone.
func (b *UnsafeBaseline) Retry(ctx context.Context, req RetryRequest) (leasework.Status, error) {
	res, err := b.RetryMany(ctx, []RetryRequest{req})
	if err != nil {
		return "", err
	}
	return res[0].Status, res[0].Err
}

// RetryMany sends rows back to READY by id alone.
func (b *UnsafeBaseline) RetryMany(ctx context.Context, reqs []RetryRequest) ([]Result, error) {
	refs, delays, errs, err := splitRetries(reqs)
	if err != nil {
		return nil, err
	}
	ids, gens := splitRefs(refs)
	a := b.drv.Array
	return b.guarded(ctx, "retry", refs, errs, b.retrySQL, a(ids), a(gens), a(delays), a(errs))
}

// splitRefs returns the ids and generations of refs, for the baseline's
// statements, which join the rows with unnest($1, $2) as the lab did.
func splitRefs(refs []leasework.Ref) (ids, gens []int64) {
	ids, gens = make([]int64, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ids[i], gens[i] = r.ID, r.Generation
	}
	return ids, gens
}
