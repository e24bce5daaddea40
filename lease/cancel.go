package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// CancelledPrefix starts the last error of a cancelled event.
const CancelledPrefix = "cancelled"

// cancelSQL ends an unfinished row DISCARDED, recording why, and gives it a
// new generation: the attempt running it, if any, is stale from this
// moment, so its renewals and outcome writes are rejected. A keyed row
// passes its key on, as a discarded one does. Idle workers need no
// wakeup: nothing becomes claimable but the key's next event, which the
// key's commit trigger announces.
const cancelSQL = `
UPDATE {{table}} AS o
SET status = 'DISCARDED', generation = ` + nextGeneration + `, lease_until = NULL,
    last_error = $2, finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE o.id = $1 AND o.status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING')
RETURNING o.generation`

// ErrFinished is returned by [Store.Cancel] for an event already finished
// (DONE or DISCARDED): there is nothing to cancel. Nothing was written.
var ErrFinished = errors.New("lease: the event is already finished")

// Cancel ends an unfinished event (READY, WAITING, INPROGRESS or FAILED)
// at once: it becomes DISCARDED, with last error "cancelled: reason" (or
// "cancelled"), and a new generation. If a worker runs it, that attempt no
// longer owns it: its next renewal and its outcome are rejected, and the
// framework cancels its handler's context with leasework.ErrCancelled (at
// its next renewal, within RenewEvery). A keyed event passes its key on,
// as a discarded one does. It returns the row's new generation; an error
// matching [ErrNotFound] when no row has that id, or [ErrFinished] when
// the event is DONE or DISCARDED already.
//
// Cancel is an operator's action: it is not guarded by a generation, and
// ends whatever attempt holds the row.
func (s *Store) Cancel(ctx context.Context, id int64, reason string) (int64, error) {
	text := CancelledPrefix
	if reason != "" {
		text += ": " + reason
	}
	var gen int64
	err := s.db.QueryRowContext(ctx, s.q.cancel, id, CleanText(text, MaxErrorBytes)).Scan(&gen)
	if err == nil {
		return gen, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, s.wrapErr(fmt.Sprintf("cancel row %d", id), err)
	}
	row, gerr := s.Get(ctx, id)
	if gerr != nil {
		return 0, fmt.Errorf("lease: cancel row %d: %w", id, errprefix.Trim("lease: ", gerr))
	}
	return 0, fmt.Errorf("lease: cancel row %d: it is %s: %w", id, row.Status, errprefix.Trim("lease: ", ErrFinished))
}

// cancelledSince reports whether a row in state st was cancelled after the
// claim ref took it: DISCARDED at a later generation with the text Cancel
// writes, "cancelled" or "cancelled: <reason>" (a discarded FAILED row keeps
// its handler's error, which may start with the same word).
func cancelledSince(ref leasework.Ref, st rowState) bool {
	return st.status == leasework.StatusDiscarded && st.generation > ref.Generation &&
		(st.lastError == CancelledPrefix || strings.HasPrefix(st.lastError, CancelledPrefix+": "))
}
