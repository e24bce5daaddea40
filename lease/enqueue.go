package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/leasework/leasework"
)

// Event is one event to enqueue.
type Event struct {
	// EventID is the event's stable identity, unique in the table. Empty
	// means a new random UUID.
	EventID string
	// Kind selects the handler. Required.
	Kind string
	// Key is an optional ordering or partition key (an aggregate id, say),
	// handed to the handler as Claim.Key.
	Key string
	// Payload is the event's body. Nil is stored as empty.
	Payload []byte
	// MaxAttempts is the attempt budget. Zero means the store's default;
	// negative is an error.
	MaxAttempts int
	// RunAt delays the first attempt. Zero means at once (database time).
	RunAt time.Time
}

// Enqueued reports one enqueued event.
type Enqueued struct {
	ID        int64  // row id; 0 for a skipped duplicate
	EventID   string // the event id, generated when the caller gave none
	Duplicate bool   // the event id existed and the event was skipped
}

// EnqueueOptions changes how [Store.EnqueueWith] treats duplicates.
type EnqueueOptions struct {
	// SkipDuplicates skips events whose id already exists instead of failing
	// with leasework.ErrDuplicateEvent. Existing rows are never changed.
	SkipDuplicates bool
}

// Enqueue inserts events inside the caller's transaction: they become
// visible to workers when tx commits, and vanish if it rolls back (the
// transactional outbox). Workers listening for notifications are woken at
// commit.
//
// An event id that already exists fails the whole call with an error
// matching leasework.ErrDuplicateEvent; like any failed statement it aborts
// tx, so roll it back. Use [Store.EnqueueWith] to skip duplicates instead.
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, events ...Event) ([]Enqueued, error) {
	return s.EnqueueWith(ctx, tx, EnqueueOptions{}, events...)
}

// EnqueueWith is [Store.Enqueue] with options.
func (s *Store) EnqueueWith(ctx context.Context, tx *sql.Tx, opts EnqueueOptions, events ...Event) ([]Enqueued, error) {
	if tx == nil {
		return nil, errors.New("lease: enqueue: tx is nil; events are written in the caller's transaction")
	}
	if len(events) == 0 {
		return nil, nil
	}
	n := len(events)
	ids, kinds, keys, runAt := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads, maxAtt := make([][]byte, n), make([]int64, n)
	seen := make(map[string]int, n)
	out := make([]Enqueued, n)
	for i, e := range events {
		if e.Kind == "" {
			return nil, fmt.Errorf("lease: enqueue: event %d: Kind is empty", i)
		}
		if e.MaxAttempts < 0 {
			return nil, fmt.Errorf("lease: enqueue: event %d: MaxAttempts is %d; it must be positive, or zero for the default", i, e.MaxAttempts)
		}
		if e.EventID == "" {
			e.EventID = uuid.NewString()
		}
		if j, dup := seen[e.EventID]; dup {
			if !opts.SkipDuplicates {
				return nil, fmt.Errorf("lease: enqueue: events %d and %d share event id %q: %w", j, i, e.EventID, leasework.ErrDuplicateEvent)
			}
		}
		seen[e.EventID] = i
		ids[i], kinds[i], keys[i] = e.EventID, e.Kind, e.Key
		payloads[i] = e.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		maxAtt[i] = int64(e.MaxAttempts)
		if maxAtt[i] == 0 {
			maxAtt[i] = int64(s.maxAtt)
		}
		if !e.RunAt.IsZero() {
			runAt[i] = e.RunAt.UTC().Format(time.RFC3339Nano)
		}
		out[i] = Enqueued{EventID: e.EventID, Duplicate: true}
	}
	q := s.q.enqueue
	if opts.SkipDuplicates {
		q = s.q.enqueueSkip
	}
	a := s.drv.Array
	rows, err := tx.QueryContext(ctx, q, a(ids), a(kinds), a(keys), a(payloads), a(maxAtt), a(runAt))
	if err != nil {
		return nil, s.enqueueError(err)
	}
	defer rows.Close()
	inserted := make(map[string]int64, n)
	for rows.Next() {
		var id int64
		var eventID string
		if err := rows.Scan(&id, &eventID); err != nil {
			return nil, fmt.Errorf("lease: enqueue: %w", err)
		}
		inserted[eventID] = id
	}
	if err := rows.Err(); err != nil {
		return nil, s.enqueueError(err)
	}
	for i := range out {
		if id, ok := inserted[out[i].EventID]; ok && seen[out[i].EventID] == i {
			out[i].ID, out[i].Duplicate = id, false
		}
	}
	return out, nil
}

func (s *Store) enqueueError(err error) error {
	if s.drv.SQLState(err) == leasework.SQLStateUniqueViolation {
		return fmt.Errorf("lease: enqueue: %w: %w", leasework.ErrDuplicateEvent, err)
	}
	return s.wrapErr("enqueue", err)
}
