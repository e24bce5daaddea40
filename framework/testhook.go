package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/testclaim"
)

// The functions below serve a handler that a test runs without a worker
// (leaseworktest.Work, WorkKind and WorkTx): its context carries a
// testclaim.Attempt instead of an attempt of a Worker. ClaimFromContext,
// RecordProgress and CompleteInTx fall back to them when the context holds
// no attempt; with neither they return what they always did. Nothing here
// writes to a database: a test's claim has no row.

// testClaimFrom is ClaimFromContext for a test's handler.
func testClaimFrom(ctx context.Context) (*leasework.Claim, bool) {
	a, ok := testclaim.From(ctx)
	if !ok {
		return nil, false
	}
	return a.Claim, true
}

// recordTestProgress is RecordProgress for a test's handler: it keeps the
// progress for the test to read, after the same size check.
func recordTestProgress(ctx context.Context, progress []byte) error {
	a, ok := testclaim.From(ctx)
	if !ok {
		return ErrNoClaim
	}
	if len(progress) > MaxProgressSize {
		return fmt.Errorf("%w: %d bytes; at most %d are allowed", ErrProgressTooLarge, len(progress), MaxProgressSize)
	}
	a.RecordProgress(progress)
	return nil
}

// completeTestTx is CompleteInTx for a test's TxFunc: it records that the
// completion was asked for in tx, after the same checks of ctx and tx.
func completeTestTx(ctx context.Context, tx *sql.Tx) error {
	a, ok := testclaim.From(ctx)
	switch {
	case !ok:
		return ErrNoClaim
	case a.Tx == nil:
		return errors.New("framework: CompleteInTx: the context is not a Transactional handler's")
	case tx != a.Tx:
		return errors.New("framework: CompleteInTx: tx is not the transaction Transactional began for this handler")
	}
	a.CompleteInTx()
	return nil
}
