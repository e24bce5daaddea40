package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// discardSQL is the operator's way out of a FAILED row: it ends DISCARDED,
// and the key it held passes to the rows waiting behind it. It is guarded
// by the status and the generation the operator saw, so a row requeued and
// failed again since is not discarded unseen. The generation grows, as with
// every repair.
const discardSQL = `
UPDATE {{table}} AS o
SET status = 'DISCARDED', generation = ` + nextGeneration + `, worker = NULL,
    finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE o.id = $1 AND o.status = 'FAILED' AND o.generation = $2
RETURNING o.generation`

// heldKeysSQL lists the keys held by a FAILED row, with the rows waiting
// behind each: the live-key index finds the FAILED keyed rows in key order
// (its predicate is spelled out so the planner can use it, and the status
// check's collation keeps it from reading the FAILED index instead, every
// FAILED row of the table, keyed or not, under a generic plan), the
// waiting index counts each key's followers.
const heldKeysSQL = `
SELECT h.key, h.id, h.event_id, h.kind, h.generation, COALESCE(h.last_error, ''),
    h.finished_at, w.n
FROM {{table}} AS h
CROSS JOIN LATERAL (SELECT count(*) FROM {{table}} AS f
                    WHERE f.key = h.key AND f.status = 'WAITING') AS w(n)
WHERE h.status IN ('READY', 'INPROGRESS', 'FAILED') AND h.key IS NOT NULL
  AND h.status = 'FAILED' COLLATE "C" AND h.key > $1
ORDER BY h.key
LIMIT $2`

// ErrNotFailed is returned by [Store.Discard] when the row named is not
// FAILED at the generation given: it was requeued, discarded or changed
// since, or never failed. Nothing was written.
var ErrNotFailed = errors.New("lease: not a FAILED row at that generation")

// Discard gives up on a FAILED row: it becomes DISCARDED, a terminal state
// kept for the record until retention deletes it as it deletes DONE rows
// ([Store.DeleteFinished]), and, if it has a key, the first event waiting
// behind it becomes READY. ref names the row and the generation the
// operator saw FAILED (see [Store.Get], [Store.List] and
// [Store.HeldKeys]); a row requeued and failed again since has a newer
// generation and is not discarded. It returns the row's new generation,
// given as a claim's is (see Ownership in the package doc).
//
// A row that does not exist is [ErrNotFound]; a row not FAILED at
// ref.Generation is [ErrNotFailed], and nothing is written.
func (s *Store) Discard(ctx context.Context, ref leasework.Ref) (int64, error) {
	var gen int64
	err := s.db.QueryRowContext(ctx, s.q.discard, ref.ID, ref.Generation).Scan(&gen)
	if err == nil {
		return gen, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, s.wrapErr(fmt.Sprintf("discard row %d", ref.ID), err)
	}
	row, gerr := s.Get(ctx, ref.ID)
	if gerr != nil {
		return 0, fmt.Errorf("lease: discard row %d: %w", ref.ID, errprefix.Trim("lease: ", gerr))
	}
	return 0, fmt.Errorf("lease: discard row %d generation %d: it is %s at generation %d: %w",
		ref.ID, ref.Generation, row.Status, row.Generation, errprefix.Trim("lease: ", ErrNotFailed))
}

// HeldKey is a key held by a FAILED event: the events waiting behind it are
// not claimed until an operator requeues or discards it.
type HeldKey struct {
	Key        string
	HeadID     int64     // the FAILED row
	EventID    string    // its event id
	Kind       string    // its kind
	Generation int64     // its generation: pass it to [Store.Discard]
	LastError  string    // why it failed
	FailedAt   time.Time // when it failed
	Waiting    int64     // events of the key waiting behind it
}

// HeldKeysRequest pages through [Store.HeldKeys].
type HeldKeysRequest struct {
	AfterKey string // keys greater than this only, for paging
	Limit    int    // zero means 100; negative is an error
}

// HeldKeys lists, in key order, the keys held by a FAILED event, with the
// number of events waiting behind each. A key whose head is READY (a retry
// not yet due) or INPROGRESS moves on by itself and is not listed.
func (s *Store) HeldKeys(ctx context.Context, req HeldKeysRequest) ([]HeldKey, error) {
	if req.Limit < 0 {
		return nil, fmt.Errorf("lease: held keys: Limit is %d; it must not be negative", req.Limit)
	}
	if req.Limit == 0 {
		req.Limit = 100
	}
	rows, err := s.db.QueryContext(ctx, s.q.heldKeys, req.AfterKey, req.Limit)
	if err != nil {
		return nil, s.wrapErr("held keys", err)
	}
	defer rows.Close()
	out := []HeldKey{}
	for rows.Next() {
		var h HeldKey
		var failed *time.Time
		if err := rows.Scan(&h.Key, &h.HeadID, &h.EventID, &h.Kind, &h.Generation, &h.LastError, &failed, &h.Waiting); err != nil {
			return nil, s.wrapErr("held keys", err)
		}
		if failed != nil {
			h.FailedAt = *failed
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("held keys", err)
	}
	return out, nil
}

// keyHeadSQL reads a key's head: its live row, if any.
const keyHeadSQL = `SELECT ` + rowColumns + ` FROM {{table}}
WHERE key = $1 AND status IN ('READY', 'INPROGRESS', 'FAILED') AND key IS NOT NULL
ORDER BY key_seq NULLS FIRST, id
LIMIT 1`

// KeyHead returns the head of key: its one READY, INPROGRESS or FAILED row,
// the one its waiting rows wait for; nil when the key has none.
func (s *Store) KeyHead(ctx context.Context, key string) (*Row, error) {
	r, err := scanRow(s.db.QueryRowContext(ctx, s.q.keyHead, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrapErr(fmt.Sprintf("head of key %q", key), err)
	}
	return &r, nil
}
