package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// Row is the whole persisted state of one event, for operators and tests.
type Row struct {
	ID            int64
	EventID       string
	Kind          string
	Key           string
	Payload       []byte
	Status        leasework.Status
	Generation    int64
	Attempt       int        // claims so far, snoozed and crashed ones included (leasework.Claim.Attempt)
	Snoozes       int        // claims that ended in a snooze (leasework.Claim.Snoozes)
	MaxAttempts   int        // the budget of claims: as enqueued, plus one for each snooze
	LeaseUntil    *time.Time // nil unless INPROGRESS
	NextAttemptAt time.Time
	LastError     string
	Progress      []byte
	Worker        string // the worker holding the claim; for a DONE or FAILED row, the last one that held it
	CreatedAt     time.Time
	UpdatedAt     time.Time
	FinishedAt    *time.Time
	Queue         string
	Priority      int
	Metadata      map[string]string // nil when the event has none
	// Partition is the event's partition key ([Event].Partition); "" for
	// none. A row a partition's concurrency limit set aside is WAITING
	// with no Key ([Store.WhyNotRunning] says so).
	Partition string
	// Cost is how many starts each attempt of the event takes under rate
	// limits ([Event].Cost): 1 unless it was enqueued with more.
	Cost int
	// DecodeError, when not nil, names the columns of the row that could
	// not be decoded into their fields, which are left zero: values the
	// schema refuses today, written before it did (metadata that is not an
	// object of strings, a timestamp of infinity). A claim that takes such
	// a row ends it FAILED, with a reason naming the column.
	DecodeError error
	// CancelledAt is when [Store.Cancel] cancelled the event; nil if it
	// never did. On a DISCARDED row it tells a cancelled event from a
	// discarded FAILED one; on an INPROGRESS row, the cancel waits for the
	// attempt that runs it to stop or its lease to end.
	CancelledAt *time.Time
	// Steps are the steps recorded for the event (framework.Step,
	// [Step]), in the order recorded; Output is what its handler recorded
	// as its output ([Output]), or nil. [Store.Get] and
	// [Store.GetByEventID] read both; [Store.List] leaves them out.
	Steps  []StepRecord
	Output []byte
}

// StepRecord is one step recorded for an event: its name, the generation
// of the claim that recorded it, when (database clock), and its encoded
// result.
type StepRecord struct {
	Name       string
	Generation int64
	At         time.Time
	Value      []byte
}

// ErrNotFound is returned by [Store.Get] and [Store.GetByEventID] for a row
// that does not exist.
var ErrNotFound = errors.New("lease: no such event")

type scanner interface{ Scan(dest ...any) error }

// scanRow reads a row of rowColumns; scanWholeRow, of rowWholeColumns.
func scanRow(sc scanner) (Row, error) { return scanRowOf(sc, false) }

func scanWholeRow(sc scanner) (Row, error) { return scanRowOf(sc, true) }

func scanRowOf(sc scanner, whole bool) (Row, error) {
	var r Row
	var lease, finished, cancelled sql.NullTime
	var status, meta, steps string
	var d decoder
	dest := []any{&r.ID, col(&d, "event_id", &r.EventID), col(&d, "kind", &r.Kind), col(&d, "key", &r.Key),
		col(&d, "payload", &r.Payload), col(&d, "status", &status), col(&d, "generation", &r.Generation),
		col(&d, "attempt", &r.Attempt), col(&d, "max_attempts", &r.MaxAttempts), col(&d, "lease_until", &lease),
		col(&d, "next_attempt_at", &r.NextAttemptAt), col(&d, "last_error", &r.LastError),
		col(&d, "progress", &r.Progress), col(&d, "worker", &r.Worker), col(&d, "created_at", &r.CreatedAt),
		col(&d, "updated_at", &r.UpdatedAt), col(&d, "finished_at", &finished), col(&d, "queue", &r.Queue),
		col(&d, "priority", &r.Priority), col(&d, "metadata", &meta), col(&d, "snoozes", &r.Snoozes),
		col(&d, "cancelled_at", &cancelled), col(&d, "partition_key", &r.Partition),
		col(&d, "cost", &r.Cost)}
	if whole {
		dest = append(dest, col(&d, "steps", &steps), col(&d, "output", &r.Output))
	}
	if err := sc.Scan(dest...); err != nil {
		return Row{}, err
	}
	d.metadata(meta, &r.Metadata)
	var byName map[string]StepRecord
	d.steps(steps, &byName)
	for _, st := range byName {
		r.Steps = append(r.Steps, st)
	}
	slices.SortFunc(r.Steps, func(a, b StepRecord) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	r.DecodeError = d.err()
	r.Status = leasework.Status(status)
	if lease.Valid {
		r.LeaseUntil = &lease.Time
	}
	if finished.Valid {
		r.FinishedAt = &finished.Time
	}
	if cancelled.Valid {
		r.CancelledAt = &cancelled.Time
	}
	return r, nil
}

// Get reads one row by id.
func (s *Store) Get(ctx context.Context, id int64) (Row, error) {
	r, err := scanWholeRow(s.db.QueryRowContext(ctx, s.q.get, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("lease: get row %d: %w", id, errprefix.Trim("lease: ", ErrNotFound))
	}
	if err != nil {
		return Row{}, s.wrapErr(fmt.Sprintf("get row %d", id), err)
	}
	return r, nil
}

// GetByEventID reads one row by event id.
func (s *Store) GetByEventID(ctx context.Context, eventID string) (Row, error) {
	r, err := scanWholeRow(s.db.QueryRowContext(ctx, s.q.getByEvent, eventID))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("lease: get event %q: %w", eventID, errprefix.Trim("lease: ", ErrNotFound))
	}
	if err != nil {
		return Row{}, s.wrapErr(fmt.Sprintf("get event %q", eventID), err)
	}
	return r, nil
}

// ListRequest selects rows for [Store.List].
type ListRequest struct {
	Status leasework.Status // "" for any status
	Kind   string           // "" for any kind
	Queue  string           // "" for any queue
	// Partition selects the rows of one partition ([Event].Partition);
	// "" for any, with a partition or not.
	Partition string
	AfterID   int64 // rows with a larger id only, for paging
	Limit     int   // zero means 100
}

// List returns rows in id order.
func (s *Store) List(ctx context.Context, req ListRequest) ([]Row, error) {
	return s.list(ctx, sqlTx{q: s.db, drv: s.drv}, req)
}

// ListTx is [Store.List] inside tx: it sees what tx wrote and has not
// committed (the events a transaction enqueued, say). tx is a transaction
// of any database library: [Store.WrapTx] adapts a *sql.Tx, driver/pgx's
// WrapTx a pgx.Tx. A nil tx is an error.
func (s *Store) ListTx(ctx context.Context, tx leasework.Tx, req ListRequest) ([]Row, error) {
	if tx == nil {
		return nil, errors.New("lease: list: tx is nil")
	}
	return s.list(ctx, tx, req)
}

func (s *Store) list(ctx context.Context, q leasework.Tx, req ListRequest) ([]Row, error) {
	if req.Status != "" && !req.Status.Valid() {
		return nil, fmt.Errorf("lease: list: unknown status %q (want READY, INPROGRESS, DONE, FAILED, WAITING or DISCARDED)", req.Status)
	}
	if req.Limit < 0 {
		return nil, fmt.Errorf("lease: list: Limit is %d; it must not be negative", req.Limit)
	}
	if req.Limit == 0 {
		req.Limit = 100
	}
	rows, err := q.Query(ctx, s.q.list, string(req.Status), req.Kind, req.AfterID, req.Limit, req.Queue, req.Partition)
	if err != nil {
		return nil, s.wrapErr("list", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, s.wrapErr("list", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("list", err)
	}
	return out, nil
}

// RequeueRequest selects FAILED rows to give another chance. Exactly one of
// IDs, Refs, Kinds and All selects; the budget fields say how many attempts
// the rows get.
type RequeueRequest struct {
	IDs []int64 // these rows
	// Refs are rows, each with the generation the operator saw it FAILED
	// at (as [Store.Discard] takes): a row requeued and failed again
	// since has a newer generation, and is left alone.
	Refs  []leasework.Ref
	Kinds []string // every FAILED row of these kinds
	All   bool     // every FAILED row

	// ExtraAttempts, when positive, extends each row's budget to the attempts
	// it has used plus ExtraAttempts. Zero resets the attempt count, and the
	// snooze count with it, so each row has its whole MaxAttempts again,
	// less what its snoozes had added. Negative is an error.
	ExtraAttempts int
}

// Requeue moves the selected FAILED rows back to READY, due at once, and
// returns their ids. Their generation grows, so an owner from before the
// requeue stays stale. Rows in any other state, and rows of Refs at
// another generation, are left alone. Listening workers are notified.
func (s *Store) Requeue(ctx context.Context, req RequeueRequest) ([]int64, error) {
	n := 0
	for _, set := range []bool{len(req.IDs) > 0, len(req.Refs) > 0, len(req.Kinds) > 0, req.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("lease: requeue: set exactly one of IDs, Refs, Kinds and All")
	}
	if req.ExtraAttempts < 0 {
		return nil, fmt.Errorf("lease: requeue: ExtraAttempts is %d; it must not be negative", req.ExtraAttempts)
	}
	var rows *sql.Rows
	var err error
	switch {
	case len(req.Refs) > 0:
		args := append(s.batchArgs(req.Refs, nil), s.channel, req.ExtraAttempts)
		rows, err = s.db.QueryContext(ctx, s.q.requeueRefs, args...)
	case len(req.IDs) > 0:
		rows, err = s.db.QueryContext(ctx, s.q.requeueByID, s.drv.Array(req.IDs), req.ExtraAttempts, s.channel)
	default:
		kinds := req.Kinds
		if kinds == nil {
			kinds = []string{}
		}
		rows, err = s.db.QueryContext(ctx, s.q.requeue, s.drv.Array(kinds), req.ExtraAttempts, s.channel, req.All)
	}
	if err != nil {
		return nil, s.wrapErr("requeue", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, s.wrapErr("requeue", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("requeue", err)
	}
	return out, nil
}

// Stats are the database-side figures of one table, read in one query.
type Stats struct {
	// Rows counts the rows of each status; every status of
	// leasework.Statuses is present, zero included.
	Rows map[leasework.Status]int64
	// HeldKeys counts keys held by a FAILED row: their waiting rows are not
	// claimed until it is requeued or discarded ([Store.HeldKeys] lists
	// them).
	HeldKeys int64
	// Eligible counts READY rows that are due now.
	Eligible int64
	// ExpiredClaims counts INPROGRESS rows whose lease has expired: work
	// abandoned by a dead or stalled worker, waiting to be reclaimed.
	ExpiredClaims int64
	// OldestEligibleAge is how long the longest-waiting claimable row (due
	// READY, or expired INPROGRESS) has been claimable; zero when none is.
	OldestEligibleAge time.Duration
}

// Stats reads the table's figures. It scans the table, so call it at
// metrics-scrape rates, not per job.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	statuses := leasework.Statuses()
	counts := make([]int64, len(statuses))
	st := Stats{Rows: make(map[leasework.Status]int64, len(statuses))}
	var age float64
	dest := make([]any, 0, len(statuses)+4)
	for i := range counts {
		dest = append(dest, &counts[i])
	}
	dest = append(dest, &st.HeldKeys, &st.Eligible, &st.ExpiredClaims, &age)
	if err := s.db.QueryRowContext(ctx, s.q.stats).Scan(dest...); err != nil {
		return Stats{}, s.wrapErr("stats", err)
	}
	for i, status := range statuses {
		st.Rows[status] = counts[i]
	}
	st.OldestEligibleAge = time.Duration(age * float64(time.Second))
	return st, nil
}

// DeleteFinished deletes up to limit finished rows, DONE and DISCARDED
// (cancelled, or given up on after they failed), that finished at least
// olderThan ago (zero: any), oldest first, and returns how many it
// deleted. FAILED rows are kept for repair. A deleted row's event id can be
// enqueued again as a new event: keep finished rows at least as long as ids
// must deduplicate (the framework's retention loop never passes less than
// its DedupeWindow, 24 hours).
func (s *Store) DeleteFinished(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteFinished(ctx, "delete finished", olderThan, limit, true)
}

// DeleteDiscarded is [Store.DeleteFinished] for DISCARDED rows only: the
// retention of a table whose completions delete their rows
// (CompleteAndDelete), which keeps no DONE row but the record of its
// cancels and discards.
func (s *Store) DeleteDiscarded(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteFinished(ctx, "delete discarded", olderThan, limit, false)
}

func (s *Store) deleteFinished(ctx context.Context, op string, olderThan time.Duration, limit int, done bool) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("lease: %s: olderThan is %v; it must not be negative", op, olderThan)
	}
	if limit < 1 {
		return 0, fmt.Errorf("lease: %s: limit is %d; it must be at least 1", op, limit)
	}
	res, err := s.db.ExecContext(ctx, s.q.deleteFinished, olderThan.Microseconds(), limit, done)
	if err != nil {
		return 0, s.wrapErr(op, err)
	}
	return res.RowsAffected()
}
