package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// CancelledPrefix starts the last error of a cancelled event: "cancelled",
// or "cancelled: <reason>". It is text for people; whether an event was
// cancelled is [Row].CancelledAt.
const CancelledPrefix = "cancelled"

// A cancel and the attempt it stops (invariant 16). A cancel must not let
// anything that holds capacity pass on (a key's turn, first of all) while
// the cancelled attempt may still run, and a worker hears of a cancel only
// at its next renewal. So the rule, here and nowhere else:
//
//   - A cancel of an event that no attempt holds under a live lease ends it
//     DISCARDED at once (cancelSQL).
//   - A cancel of a running attempt only marks its row (cancelled_at): the
//     row stays INPROGRESS under its owner's lease, and every guarded write
//     of the owner is rejected (notCancelled is part of the guard), its
//     renewal included, which is how the owner hears of it.
//   - The owner's next outcome write after that (complete, retry, fail,
//     release: written once its handler has returned) is rejected as
//     cancelled and ends the row DISCARDED (stopSQL): the acknowledged stop.
//   - An owner that never writes (dead, paused) holds the row until its
//     lease ends; a claim statement without a lease floor (a worker's
//     sweep, at least once a second) then ends it DISCARDED instead of
//     claiming it again (the "stopped" step of claimSQL).
//
// The key's commit trigger (migration 4) passes the key on at the commit
// that makes the row DISCARDED, so never before one of those two. A DELETE
// of a keyed row under a live lease is refused (migration 11) for the
// same reason.

// notCancelled is the part of every guard (guard, ownedPerRow) that
// rejects the writes of an attempt whose event was cancelled while it ran.
const notCancelled = `o.cancelled_at IS NULL`

// runningLease holds for a row o that an attempt holds under a lease that
// has not ended by the statement's time, the claim's measure: such a row
// cannot be claimed by anyone else, and its owner may still run.
const runningLease = `(o.status = 'INPROGRESS' AND o.lease_until > statement_timestamp())`

// cancelSQL cancels an unfinished row ($1) with the text $2. A row that no
// attempt holds under a running lease ends DISCARDED at once, with a new
// generation, so that a stale owner (a paused one whose lease ran out) is
// rejected. A running attempt's row is only marked: it keeps its status,
// generation and lease until its attempt stops or the lease ends (see
// above). Cancelling a marked row again changes nothing. It returns the
// row's generation and whether it waits for an attempt.
const cancelSQL = `
UPDATE {{table}} AS o
SET status = CASE WHEN ` + runningLease + ` THEN o.status ELSE 'DISCARDED' END,
    generation = CASE WHEN ` + runningLease + ` THEN o.generation ELSE ` + nextGeneration + ` END,
    lease_until = CASE WHEN ` + runningLease + ` THEN o.lease_until END,
    finished_at = CASE WHEN ` + runningLease + ` THEN o.finished_at ELSE statement_timestamp() END,
    cancelled_at = COALESCE(o.cancelled_at, statement_timestamp()),
    last_error = CASE WHEN o.cancelled_at IS NULL THEN $2 ELSE o.last_error END,
    updated_at = CASE WHEN o.cancelled_at IS NULL THEN statement_timestamp() ELSE o.updated_at END
WHERE o.id = $1 AND o.status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING')
RETURNING o.generation, o.status = 'INPROGRESS'`

// stopSQL is the acknowledged stop: the rows of $1 whose attempts ($2, as
// in batchGuard) were cancelled while they ran, and whose owners have
// written an outcome since, end DISCARDED with a new generation. It is
// guarded as every write of the owner, except that it asks for the mark
// instead of refusing it. It is sent one row at a time (stopCancelled).
const stopSQL = `
WITH ` + lockedCTE + `
UPDATE {{table}} AS o
SET status = 'DISCARDED', generation = ` + nextGeneration + `, lease_until = NULL,
    finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE o.id = ANY (ARRAY(SELECT id FROM locked)) AND ` + inProgress + ` AND o.cancelled_at IS NOT NULL
  AND o.generation = (` + rowValue + ` ->> 0)::bigint
  AND o.lease_until > clock_timestamp()`

// ErrFinished is returned by [Store.Cancel] for an event already finished
// (DONE or DISCARDED): there is nothing to cancel. Nothing was written.
var ErrFinished = errors.New("lease: the event is already finished")

// CancelResult is what [Store.Cancel] did.
type CancelResult struct {
	// Generation is the row's generation after the cancel: a new one when
	// the event ended DISCARDED at once, the running attempt's when
	// Stopping.
	Generation int64
	// Stopping is set when an attempt held the event under a running
	// lease: the event is marked cancelled (Row.CancelledAt) and stays
	// INPROGRESS, holding its key, until that attempt stops or its lease
	// ends; then it is DISCARDED at a new generation. Unset, the event is
	// DISCARDED now.
	Stopping bool
}

// Cancel cancels an unfinished event (READY, WAITING, INPROGRESS or
// FAILED): it records when (Row.CancelledAt) and the last error
// "cancelled: reason" (or "cancelled"), and the event is never claimed
// again.
//
// An event that no attempt runs under a live lease becomes DISCARDED at
// once, with a new generation. An event that an attempt runs stays
// INPROGRESS under that attempt's lease ([CancelResult].Stopping): every
// write of the attempt is rejected from now on as cancelled
// ([VerdictCancelled], leasework.ErrCancelled), its renewal first, at which
// the framework cancels the handler's context with leasework.ErrCancelled.
// The owner's next outcome write (once its handler has returned) ends the
// event DISCARDED; an owner that never writes (dead, paused) holds it until
// its lease ends, and a claim then ends it DISCARDED (one without
// [ClaimRequest.ExpiredFrom]: a worker's sweep, at least once a second).
// A keyed event passes its key on only then: the next event of the key
// never starts while the cancelled attempt may still run. Cancelling an
// event that waits for its attempt again changes nothing and reports it
// Stopping.
//
// It returns an error matching [ErrNotFound] when no row has that id, or
// [ErrFinished] when the event is DONE or DISCARDED already.
//
// Cancel is an operator's action: it is not guarded by a generation, and
// stops whatever attempt holds the row.
func (s *Store) Cancel(ctx context.Context, id int64, reason string) (CancelResult, error) {
	text := CancelledPrefix
	if reason != "" {
		text += ": " + reason
	}
	var res CancelResult
	err := s.db.QueryRowContext(ctx, s.q.cancel, id, CleanText(text, MaxErrorBytes)).Scan(&res.Generation, &res.Stopping)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return CancelResult{}, s.wrapErr(fmt.Sprintf("cancel row %d", id), err)
	}
	row, gerr := s.Get(ctx, id)
	if gerr != nil {
		return CancelResult{}, fmt.Errorf("lease: cancel row %d: %w", id, errprefix.Trim("lease: ", gerr))
	}
	return CancelResult{}, fmt.Errorf("lease: cancel row %d: it is %s: %w", id, row.Status, errprefix.Trim("lease: ", ErrFinished))
}

// cancelledSince reports whether a row in state st was cancelled after the
// claim ref took it: marked while ref's attempt runs it, or DISCARDED by a
// cancel at a later generation.
func cancelledSince(ref leasework.Ref, st rowState) bool {
	if !st.cancelled {
		return false
	}
	switch st.status {
	case leasework.StatusInProgress:
		return st.generation == ref.Generation
	case leasework.StatusDiscarded:
		return st.generation > ref.Generation
	}
	return false
}

// rowCancelledSince reports whether the row of ref, read again, shows the
// event cancelled after ref's claim took it (false when that cannot be
// read: the caller's error stays ErrLeaseLost).
func (s *Store) rowCancelledSince(ctx context.Context, ref leasework.Ref) bool {
	var id int64
	var st rowState
	err := s.db.QueryRowContext(ctx, s.q.rejected, s.drv.Array([]int64{ref.ID})).
		Scan(&id, &st.status, &st.generation, &st.lastError, &st.cancelled)
	return err == nil && cancelledSince(ref, st)
}

// stopCancelled ends DISCARDED the row of ref, whose attempt was cancelled
// while it ran: the write that was rejected is that attempt's acknowledged
// stop. One statement per row: a transaction that ends rows of several keys
// gives way to an enqueue of one of them (migration 4) and would fail. A
// cancel of a running attempt is rare; so are these.
func (s *Store) stopCancelled(ctx context.Context, ref leasework.Ref) error {
	_, err := s.db.ExecContext(ctx, s.q.stop, s.batchArgs([]leasework.Ref{ref}, nil)...)
	return err
}
