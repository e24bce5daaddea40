package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/leasework/leasework"
	"github.com/sourcegraph/conc/panics"
)

// Event is one event to enqueue.
type Event struct {
	// EventID is the event's stable identity and its dedupe key: enqueue
	// refuses an id whose row exists (leasework.ErrDuplicateEvent), pending,
	// FAILED or DONE, until the row is deleted. The framework keeps DONE
	// rows 24 hours by default (its DedupeWindow), so an event completed
	// within that window cannot be enqueued and handled again; completions
	// that delete their rows (framework.Config.DeleteAtCompletion,
	// [CompleteAndDelete]) give that up. Empty means a new random
	// UUID. Valid UTF-8 without NUL bytes, at most [MaxEventIDBytes].
	EventID string
	// Kind selects the handler. Required; see [ValidateKind].
	Kind string
	// Key is an optional ordering key (an aggregate id, say), handed to the
	// handler as Claim.Key. Events with the same non-empty key are handled
	// one at a time, in the order their transactions committed (see "Order
	// per key" in the package doc); the enqueuing transaction must be READ
	// COMMITTED. Empty means no order. Valid UTF-8 without NUL bytes, at
	// most [MaxKeyBytes].
	Key string
	// Partition is an optional partition key (a tenant, an account, a
	// downstream host): a concurrency limit of [ScopePartition] bounds the
	// live attempts of each partition's events, across every worker (see
	// [Limit]). Empty means none; a partition under no limit is not
	// counted. It is not an ordering key: the events of a partition may
	// run in any order, up to its limit at once (give them a Key as well
	// for order). Valid UTF-8 without NUL bytes, at most
	// [MaxPartitionBytes].
	Partition string
	// Cost is how many starts the event's attempts take under rate limits
	// (see [RateLimit]): a call that sends ten messages, say. Zero means 1;
	// at most [MaxCost].
	Cost int
	// Payload is the event's body, any bytes. Nil is stored as empty.
	Payload []byte
	// MaxAttempts is the attempt budget. Zero means the store's default;
	// negative is an error.
	MaxAttempts int
	// RunAt delays the first attempt. Zero means at once (database time).
	RunAt time.Time
	// Queue is the queue the event is claimed from. Empty means
	// [DefaultQueue]. Valid UTF-8 without NUL bytes, at most
	// [MaxQueueBytes].
	Queue string
	// Priority is the event's level in its queue, from 0 (the default,
	// claimed first) to [MaxPriority]; how levels are claimed is "Queues
	// and priorities" in the package doc.
	Priority int
	// Unique, when not nil, derives the event's id from its kind and the
	// parts of the event it names (its arguments, period, queue), so that
	// an enqueue of the same arguments is a duplicate: see [Unique]. The
	// event then gives no EventID.
	Unique *Unique
	// Metadata is string pairs that travel with the event to its claims
	// ([leasework.Claim.Metadata]) without being part of its payload: the
	// enqueuer's trace context, a tenant, a correlation id. Nil or empty
	// means none. Keys are not empty; keys and values are valid UTF-8
	// without NUL bytes, at most [MaxMetadataBytes] together. Stored as a
	// jsonb object.
	Metadata map[string]string
}

// EnqueueFunc enqueues events in the transaction of the call it belongs
// to, returning one [Enqueued] per event given, in order.
type EnqueueFunc func(ctx context.Context, events []Event) ([]Enqueued, error)

// EnqueueMiddleware wraps an enqueue: it returns the function to run in
// next's place, which may look at the events, change them (add a header to
// the payload, set a queue), time or log the call, and calls next (or
// refuses). It must return one Enqueued per event it was given. The events
// it passes on are checked as any others.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc

// Enqueued reports one enqueued event.
type Enqueued struct {
	ID        int64  // row id; 0 for a skipped duplicate
	EventID   string // the event id, generated when the caller gave none
	Duplicate bool   // the event id existed, or came earlier in the call, and the event was skipped
}

// EnqueueOptions changes how [Store.EnqueueWith] treats duplicates.
type EnqueueOptions struct {
	// SkipDuplicates skips events whose id already exists, or appeared
	// earlier in the same call, instead of failing with
	// leasework.ErrDuplicateEvent. Existing rows are never changed; of one
	// id given twice in a call, the first is inserted. An id whose row is
	// deleted while the call runs (by retention, say) is free again, and
	// its event is inserted.
	SkipDuplicates bool
}

// Enqueue inserts events inside the caller's transaction: they become
// visible to workers when tx commits, and vanish if it rolls back (the
// transactional outbox). Workers listening for notifications are woken at
// commit. It returns one [Enqueued] per event, in the order given. The rows
// are inserted in key order, and in the order given within a key, so that
// enqueues take their keys' commit-time locks in one order (see "Order per
// key" in the package doc).
//
// Every event is checked before anything is sent (Kind, EventID, Key,
// MaxAttempts); an invalid one fails the call with an error naming its
// index and field, and leaves tx untouched.
//
// An event id that already exists in the table, or appears twice in the
// call, fails the whole call with an error matching
// leasework.ErrDuplicateEvent; an id that exists fails the statement, which
// aborts tx, so roll it back. Use [Store.EnqueueWith] to skip duplicates
// instead. A row keeps its event id for as long as it exists: pending,
// FAILED, or DONE until retention deletes it (the framework keeps DONE rows
// for its dedupe window, 24 hours, by default).
//
// Enqueue checks that every event sent was inserted, or (skipping
// duplicates) already exists; any other outcome, such as a trigger on the
// table that silently drops rows, is an error, never a gap in the result.
// After an error from the database, roll tx back.
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, events ...Event) ([]Enqueued, error) {
	return s.EnqueueWith(ctx, tx, EnqueueOptions{}, events...)
}

// EnqueueWith is [Store.Enqueue] with options.
func (s *Store) EnqueueWith(ctx context.Context, tx *sql.Tx, opts EnqueueOptions, events ...Event) ([]Enqueued, error) {
	if tx == nil {
		return nil, errors.New("lease: enqueue: tx is nil; events are written in the caller's transaction")
	}
	return s.enqueue(ctx, s.WrapTx(tx), opts, events)
}

// EnqueueTx is [Store.EnqueueWith] in a transaction of any database
// library, adapted to [leasework.Tx] (driver/pgx's WrapTx adapts a pgx.Tx,
// for services that use pgx natively): the same
// checks, the same duplicate handling, the same statements, and the same
// notification at commit (the table's insert trigger sends it). Events are
// visible to workers when tx commits. After an error from the database,
// roll tx back: an event id that already exists fails the statement, which
// aborts tx. A nil tx is an error.
func (s *Store) EnqueueTx(ctx context.Context, tx leasework.Tx, opts EnqueueOptions, events ...Event) ([]Enqueued, error) {
	if tx == nil {
		return nil, errors.New("lease: enqueue: tx is nil; events are written in the caller's transaction")
	}
	return s.enqueue(ctx, tx, opts, events)
}

// WrapTx adapts a database/sql transaction to [leasework.Tx], binding the
// store's arrays as its driver does, for the calls that take any library's
// transaction ([Store.EnqueueTx], [Store.ListTx], and leaseworktest's
// Require…Tx): driver/pgx's WrapTx is the same for a pgx.Tx. When the
// store's driver is a [leasework.Copier] (driver/pq), the result is a
// [leasework.CopyTx] that copies with it. A nil tx is returned as nil,
// which those calls refuse.
func (s *Store) WrapTx(tx *sql.Tx) leasework.Tx {
	if tx == nil {
		return nil
	}
	if c, ok := s.drv.(leasework.Copier); ok {
		return sqlCopyTx{sqlTx: sqlTx{q: tx, drv: s.drv}, tx: tx, copier: c}
	}
	return sqlTx{q: tx, drv: s.drv}
}

// sqlTx adapts a *sql.Tx, or the store's pool (List), to leasework.Tx,
// binding slices with the store's driver.
type sqlTx struct {
	q   querier
	drv leasework.Driver
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (leasework.Rows, error) {
	bound := make([]any, len(args))
	for i, a := range args {
		switch a.(type) {
		case []string, []int64, [][]byte:
			bound[i] = t.drv.Array(a)
		default:
			bound[i] = a
		}
	}
	rows, err := t.q.QueryContext(ctx, query, bound...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (t sqlTx) SQLState(err error) string { return t.drv.SQLState(err) }

// sqlRows is *sql.Rows as leasework.Rows: an error of Close also ends up in Err.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// enqueue is every enqueue: the store's middleware around one copy of the
// checks, the statement and the accounting, whatever the transaction's
// driver.
func (s *Store) enqueue(ctx context.Context, tx leasework.Tx, opts EnqueueOptions, events []Event) ([]Enqueued, error) {
	if len(s.middleware) == 0 {
		return s.enqueueIn(ctx, tx, opts, events)
	}
	var run EnqueueFunc = func(ctx context.Context, events []Event) ([]Enqueued, error) {
		return s.enqueueIn(ctx, tx, opts, events)
	}
	var out []Enqueued
	var err error
	// The middleware is the application's code: a panic in it is this
	// enqueue's error, not the end of the goroutine (a worker's scheduler,
	// say), and leaves the transaction to the caller as any error does.
	var pc panics.Catcher
	pc.Try(func() {
		for i := len(s.middleware) - 1; i >= 0; i-- {
			run = s.middleware[i](run)
		}
		out, err = run(ctx, slices.Clone(events))
	})
	if r := pc.Recovered(); r != nil {
		return nil, fmt.Errorf("lease: enqueue: the enqueue middleware panicked: %v\n%s", r.Value, r.Stack)
	}
	if err == nil && len(out) != len(events) {
		return nil, fmt.Errorf("lease: enqueue: the enqueue middleware returned %d results for %d events", len(out), len(events))
	}
	return out, err
}

// enqueueIn enqueues events in tx, after the store's middleware.
func (s *Store) enqueueIn(ctx context.Context, tx leasework.Tx, opts EnqueueOptions, events []Event) ([]Enqueued, error) {
	if len(events) == 0 {
		return nil, nil
	}
	n := len(events)
	cols := makeColumns(n)
	first := make(map[string]int, n) // event id -> index of its first event
	out := make([]Enqueued, n)
	now := time.Now() // the period of a Unique event without RunAt
	for i, e := range events {
		if err := s.checkEvent(e); err != nil {
			return nil, fmt.Errorf("lease: enqueue: event %d: %w", i, err)
		}
		if e.Unique != nil {
			id, err := uniqueID(e, now)
			if err != nil {
				return nil, fmt.Errorf("lease: enqueue: event %d: %w", i, err)
			}
			e.EventID = id
		}
		if e.EventID == "" {
			e.EventID = uuid.NewString()
		}
		out[i].EventID = e.EventID
		if j, dup := first[e.EventID]; dup {
			if !opts.SkipDuplicates {
				return nil, fmt.Errorf("lease: enqueue: events %d and %d share event id %q: %w", j, i, e.EventID, leasework.ErrDuplicateEvent)
			}
			out[i].Duplicate = true // the first of the call is the one sent
			continue
		}
		first[e.EventID] = i
		cols.add(e, s.maxAtt)
	}
	// One event goes in by its own statement, unless the store copies
	// batches that small (EnqueueCopyMin 1).
	one := len(cols.ids) == 1 && s.copyTx(tx, 1) == nil
	if !opts.SkipDuplicates && one {
		if err := s.insert(ctx, tx, s.q.enqueueOne, out, first, cols.one()...); err != nil {
			return nil, err
		}
	} else if !opts.SkipDuplicates {
		if err := s.insertNew(ctx, tx, out, first, cols); err != nil {
			return nil, err
		}
	} else if one {
		if err := s.insertSkippingOne(ctx, tx, out, first, cols); err != nil {
			return nil, err
		}
	} else if err := s.insertSkipping(ctx, tx, out, first, cols); err != nil {
		return nil, err
	}
	if err := accountForEvery(out, first); err != nil {
		return nil, err
	}
	return out, nil
}

// columns are the parameters of an enqueue's insert: one array per column,
// one entry per event sent, in the order of insertEvents.
type columns struct {
	ids, kinds, keys, runAt, queues, metadata, partitions []string
	payloads                                              [][]byte
	maxAtt, priorities, costs                             []int64
}

// makeColumns returns columns with room for n events, so that a batch of
// thousands is not copied as it grows.
func makeColumns(n int) columns {
	return columns{
		ids: make([]string, 0, n), kinds: make([]string, 0, n), keys: make([]string, 0, n),
		runAt: make([]string, 0, n), queues: make([]string, 0, n), metadata: make([]string, 0, n),
		partitions: make([]string, 0, n), costs: make([]int64, 0, n), payloads: make([][]byte, 0, n), maxAtt: make([]int64, 0, n), priorities: make([]int64, 0, n),
	}
}

// add appends e, checked, with the store's attempt budget when it has none.
func (c *columns) add(e Event, defaultAttempts int) {
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	attempts := int64(e.MaxAttempts)
	if attempts == 0 {
		attempts = int64(defaultAttempts)
	}
	var at string
	if !e.RunAt.IsZero() {
		at = e.RunAt.UTC().Format(time.RFC3339Nano)
	}
	queue := e.Queue
	if queue == "" {
		queue = DefaultQueue
	}
	c.ids, c.kinds, c.keys = append(c.ids, e.EventID), append(c.kinds, e.Kind), append(c.keys, e.Key)
	c.payloads, c.maxAtt, c.runAt = append(c.payloads, payload), append(c.maxAtt, attempts), append(c.runAt, at)
	c.queues, c.priorities = append(c.queues, queue), append(c.priorities, int64(e.Priority))
	c.metadata, c.partitions = append(c.metadata, metadataText(e.Metadata)), append(c.partitions, e.Partition)
	c.costs = append(c.costs, int64(max(e.Cost, 1)))
}

// pick returns the entries whose index keep accepts.
func (c columns) pick(keep func(i int) bool) columns {
	var p columns
	for i := range c.ids {
		if keep(i) {
			p.ids, p.kinds, p.keys = append(p.ids, c.ids[i]), append(p.kinds, c.kinds[i]), append(p.keys, c.keys[i])
			p.payloads, p.maxAtt, p.runAt = append(p.payloads, c.payloads[i]), append(p.maxAtt, c.maxAtt[i]), append(p.runAt, c.runAt[i])
			p.queues, p.priorities = append(p.queues, c.queues[i]), append(p.priorities, c.priorities[i])
			p.metadata, p.partitions = append(p.metadata, c.metadata[i]), append(p.partitions, c.partitions[i])
			p.costs = append(p.costs, c.costs[i])
		}
	}
	return p
}

// args are the columns as the insert's parameters, $1 to $11.
func (c columns) args() []any {
	return []any{c.ids, c.kinds, c.keys, c.payloads, c.maxAtt, c.runAt, c.queues, c.priorities, c.metadata, c.partitions, c.costs}
}

// one is the only event of c as the parameters of enqueueOneSQL, $1 to
// $11, in the order of args.
func (c columns) one() []any {
	return []any{c.ids[0], c.kinds[0], c.keys[0], c.payloads[0], c.maxAtt[0], c.runAt[0], c.queues[0], c.priorities[0], c.metadata[0],
		c.partitions[0], c.costs[0]}
}

// insert runs the insert statement q and records the row id of each event
// inserted. Its rows are closed before it returns, so that the connection
// is free for the next statement.
func (s *Store) insert(ctx context.Context, tx leasework.Tx, q string, out []Enqueued, first map[string]int, args ...any) error {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return s.enqueueError(tx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var eventID string
		if err := rows.Scan(&id, &eventID); err != nil {
			return s.wrapErrState(tx.SQLState, "enqueue", err)
		}
		i, sent := first[eventID]
		if !sent || out[i].ID != 0 {
			return fmt.Errorf("lease: enqueue: the database reported event id %q inserted, which was not sent once", eventID)
		}
		out[i].ID = id
	}
	if err := rows.Err(); err != nil {
		return s.enqueueError(tx, err)
	}
	return nil
}

// maxEventIDTries bounds how many times an enqueue skipping duplicates
// tries to take an event id that it found taken and then free (see
// insertSkipping).
const maxEventIDTries = 5

// insertSkipping inserts the events whose event id is new, and marks the
// others Duplicate. It takes a row id for each new event id in the event
// id table (skipping the ids there), looks up the rows of the ids it
// skipped, then inserts the events whose ids it took, with those row ids,
// in one statement or one COPY (insertTaken; in the order of
// insertEvents). An id it skipped and then found free was freed in
// between, by a commit that deleted its row (retention, say): it is no
// duplicate any more, and is taken again, up to maxEventIDTries times in
// all.
func (s *Store) insertSkipping(ctx context.Context, tx leasework.Tx, out []Enqueued, first map[string]int, cols columns) error {
	taken := make(map[string]int64, len(cols.ids))
	pending := cols
	takes := 0 // the tries that took ids
	for try := 1; len(pending.ids) > 0; try++ {
		before := len(taken)
		if err := s.takeEventIDs(ctx, tx, pending, taken); err != nil {
			return err
		}
		if len(taken) > before {
			takes++
		}
		skipped := pending.pick(func(i int) bool { _, ok := taken[pending.ids[i]]; return !ok })
		if len(skipped.ids) == 0 {
			break
		}
		freed, err := s.markDuplicates(ctx, tx, skipped.ids, out, first)
		if err != nil {
			return err
		}
		if len(freed) > 0 && try == maxEventIDTries {
			return freedTooOften(first, slices.Min(slices.Collect(maps.Keys(freed))))
		}
		pending = skipped.pick(func(i int) bool { return freed[skipped.ids[i]] })
	}
	if len(taken) == 0 {
		return nil
	}
	fresh := cols.pick(func(i int) bool { _, ok := taken[cols.ids[i]]; return ok })
	rowIDs := make([]int64, len(fresh.ids))
	for i, eventID := range fresh.ids {
		rowIDs[i] = taken[eventID]
	}
	return s.insertTaken(ctx, tx, out, first, fresh, rowIDs, takes == 1)
}

// insertSkippingOne is insertSkipping for one event, in one statement
// when its event id is new (enqueueOneSkippingSQL takes a row id for it
// and inserts the row with that id). When the id was taken, it looks the
// id's row up as insertSkipping does, marking the event Duplicate, and
// takes the id again if it was freed in between, up to maxEventIDTries
// times in all.
func (s *Store) insertSkippingOne(ctx context.Context, tx leasework.Tx, out []Enqueued, first map[string]int, cols columns) error {
	id := cols.ids[0]
	for try := 1; ; try++ {
		if err := s.insert(ctx, tx, s.q.enqueueOneSkip, out, first, cols.one()...); err != nil {
			return err
		}
		if out[first[id]].ID != 0 {
			return nil
		}
		freed, err := s.markDuplicates(ctx, tx, cols.ids, out, first)
		if err != nil || len(freed) == 0 {
			return err
		}
		if try == maxEventIDTries {
			return freedTooOften(first, id)
		}
	}
}

// freedTooOften is the error of an enqueue skipping duplicates that found
// the event id id taken, and then free, maxEventIDTries times.
func freedTooOften(first map[string]int, id string) error {
	return fmt.Errorf("lease: enqueue: event %d (event id %q): its id was taken by another row when this enqueue tried to take it, "+
		"and free when it looked that row up, %d times over: rows with that id are enqueued and deleted as fast as this enqueue runs",
		first[id], id, maxEventIDTries)
}

// takeEventIDs takes a row id for each event id of cols not in the event
// id table, recording it in taken.
func (s *Store) takeEventIDs(ctx context.Context, tx leasework.Tx, cols columns, taken map[string]int64) error {
	rows, err := tx.Query(ctx, s.q.claimEventIDs, cols.ids, cols.keys)
	if err != nil {
		return s.enqueueError(tx, err)
	}
	defer rows.Close()
	for rows.Next() {
		var eventID string
		var id int64
		if err := rows.Scan(&eventID, &id); err != nil {
			return s.wrapErrState(tx.SQLState, "enqueue", err)
		}
		taken[eventID] = id
	}
	if err := rows.Err(); err != nil {
		return s.enqueueError(tx, err)
	}
	return nil
}

// markDuplicates looks up the rows of the event ids skipped as taken, and
// marks each event whose id has its row Duplicate. It returns the ids no
// longer in the event id table: freed since they were skipped. An id there
// without its row is an error.
func (s *Store) markDuplicates(ctx context.Context, tx leasework.Tx, skipped []string, out []Enqueued, first map[string]int) (freed map[string]bool, err error) {
	freed = make(map[string]bool, len(skipped))
	for _, id := range skipped {
		freed[id] = true
	}
	rows, err := tx.Query(ctx, s.q.existing, skipped)
	if err != nil {
		return nil, s.wrapErrState(tx.SQLState, "enqueue", err)
	}
	defer rows.Close()
	for rows.Next() {
		var eventID string
		var rowID int64
		var hasRow bool
		if err := rows.Scan(&eventID, &rowID, &hasRow); err != nil {
			return nil, s.wrapErrState(tx.SQLState, "enqueue", err)
		}
		i, sent := first[eventID]
		if !sent || !freed[eventID] {
			return nil, fmt.Errorf("lease: enqueue: the database reported event id %q taken, which was not looked up once", eventID)
		}
		if !hasRow {
			return nil, fmt.Errorf("lease: enqueue: event %d (event id %q): the id is recorded as taken by row %d, which does not exist "+
				"(a trigger or rule that dropped that row's insert, or a delete that bypassed the table's triggers, leaves such an id behind)",
				i, eventID, rowID)
		}
		delete(freed, eventID)
		out[i].Duplicate = true
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErrState(tx.SQLState, "enqueue", err)
	}
	return freed, nil
}

// checkEvent checks one event before anything is sent. Its errors start with
// the field's name, and the caller puts the event's index in front.
func (s *Store) checkEvent(e Event) error {
	if e.Kind == "" {
		return errors.New("Kind is empty")
	}
	if err := validateText("Kind", e.Kind, MaxKindBytes); err != nil {
		return err
	}
	if err := validateText("EventID", e.EventID, MaxEventIDBytes); err != nil {
		return err
	}
	if err := validateText("Key", e.Key, MaxKeyBytes); err != nil {
		return err
	}
	if err := validateText("Partition", e.Partition, MaxPartitionBytes); err != nil {
		return err
	}
	if e.Cost < 0 || e.Cost > MaxCost {
		//lint:ignore ST1005 the message starts with the field's name, Cost
		return fmt.Errorf("Cost is %d; it must be between 1 and %d, or zero for 1", e.Cost, MaxCost)
	}
	if e.MaxAttempts < 0 {
		return fmt.Errorf("MaxAttempts is %d; it must be positive, or zero for the default", e.MaxAttempts)
	}
	if err := validateText("Queue", e.Queue, MaxQueueBytes); err != nil {
		return err
	}
	if e.Priority < 0 || e.Priority > MaxPriority {
		//lint:ignore ST1005 the message starts with the field's name, Priority
		return fmt.Errorf("Priority is %d; it must be between 0 and %d", e.Priority, MaxPriority)
	}
	return checkMetadata(e.Metadata)
}

// accountForEvery checks that every event sent was inserted or, skipping
// duplicates, marked Duplicate: an event whose insert went through without
// an error (its event id taken) and returned no row was dropped by
// something else.
func accountForEvery(out []Enqueued, first map[string]int) error {
	var missing []string
	for id, i := range first {
		if out[i].ID == 0 && !out[i].Duplicate {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	id := slices.Min(missing)
	return fmt.Errorf("lease: enqueue: event %d (event id %q) was not inserted, and the database reported no error (does a trigger or rule drop rows?)", first[id], id)
}

func (s *Store) enqueueError(tx leasework.Tx, err error) error {
	if tx.SQLState(err) == leasework.SQLStateUniqueViolation {
		return fmt.Errorf("lease: enqueue: %w: %w", leasework.ErrDuplicateEvent, err)
	}
	return s.wrapErrState(tx.SQLState, "enqueue", err)
}
