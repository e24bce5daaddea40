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

// The baseline's writes take the store's batch parameters (see batchArgs)
// and key their update by id alone, reporting the caller's generation as
// if the write were its own.
const baselineCompleteSQL = `
UPDATE {{table}} AS o
SET status = 'DONE', lease_until = NULL, finished_at = statement_timestamp()
WHERE o.id = ANY ($1::bigint[])
RETURNING o.id, (` + rowValue + ` ->> 0)::bigint, o.status`

const baselineRetrySQL = `
UPDATE {{table}} AS o
SET status = 'READY', lease_until = NULL, last_error = ` + rowValue + ` ->> 2,
    next_attempt_at = statement_timestamp() + (` + rowValue + ` ->> 1)::bigint * interval '1 microsecond'
WHERE o.id = ANY ($1::bigint[])
RETURNING o.id, (` + rowValue + ` ->> 0)::bigint, o.status`

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
	return b.guarded(ctx, "complete", refs, nil, nil, b.completeSQL)
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
	values := func(i int) []any { return []any{delays[i], errs[i]} }
	return b.guarded(ctx, "retry", refs, errs, values, b.retrySQL)
}
