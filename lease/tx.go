package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
)

// CompleteTx marks one claim DONE inside the caller's transaction tx, under
// the same guard and lock order as [Store.CompleteMany], so that the
// caller's business writes in tx and the completion commit together or not
// at all. A stale owner (a newer generation holds the row, its lease
// expired, the row is finished or gone) is rejected, and its business
// writes go with the rejection.
//
// It returns nil when the guard accepted the completion: the row is then
// locked by tx until tx ends. Commit tx soon: until then the claim's lease
// is not renewed (a renewal skips a locked row, see [Result].Busy), nobody
// else can claim the row either (claims skip locked rows), and the
// completion takes effect at COMMIT. If tx rolls back instead, the claim is
// as it was: INPROGRESS, owned, under its old lease.
//
// It returns an error matching leasework.ErrLeaseLost when the guard
// rejected the completion (and leasework.ErrCancelled too when the event
// was cancelled while the claim ran it), and any other error when the
// statement failed.
// In both cases CompleteTx has already rolled tx back, so a later
// tx.Commit returns sql.ErrTxDone and cannot commit the business writes by
// mistake; the caller only reports the error. A rejection is final: do not
// retry the completion in another transaction, the claim is no longer
// yours (or its completion was already committed by an earlier
// transaction of yours, whose effects must not be applied twice). A
// rejection as cancelled does not end the attempt, since the caller may
// still be running it: once it has stopped, any outcome write of the
// claim (a [Store.Release], say) ends the event, as [Store.Cancel] says.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, ref leasework.Ref) error {
	return s.completeTx(ctx, tx, ref, s.q.complete)
}

// CompleteAndDeleteTx is [Store.CompleteTx] for a table that keeps no
// history: the accepted claim's row is deleted inside tx instead of marked
// DONE, as [Store.CompleteAndDeleteMany] does. Deleting forgets the event
// id, so a later enqueue of the same id is no longer a duplicate.
func (s *Store) CompleteAndDeleteTx(ctx context.Context, tx *sql.Tx, ref leasework.Ref) error {
	return s.completeTx(ctx, tx, ref, s.q.completeDelete)
}

func (s *Store) completeTx(ctx context.Context, tx *sql.Tx, ref leasework.Ref, query string) error {
	if tx == nil {
		return errors.New("lease: complete in transaction: tx is nil")
	}
	var got leasework.Ref
	var status string
	err := tx.QueryRowContext(ctx, query, s.batchArgs([]leasework.Ref{ref}, nil)...).Scan(&got.ID, &got.Generation, &status)
	if err == nil {
		return nil
	}
	// A failed statement aborts the transaction in PostgreSQL anyway; a
	// rejected one must not commit the caller's writes.
	_ = tx.Rollback()
	if errors.Is(err, sql.ErrNoRows) {
		why := leasework.ErrLeaseLost
		if s.rowCancelledSince(ctx, ref) {
			why = leasework.ErrCancelled
		}
		return fmt.Errorf("lease: complete in transaction row %d generation %d: the transaction was rolled back: %w",
			ref.ID, ref.Generation, why)
	}
	return s.wrapErr(fmt.Sprintf("complete in transaction row %d generation %d: the transaction was rolled back", ref.ID, ref.Generation), err)
}
