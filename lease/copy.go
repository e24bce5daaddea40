package lease

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasework/leasework"
)

// DefaultEnqueueCopyMin is the batch from which an enqueue copies its
// events into the table with COPY when its transaction can
// ([Options.EnqueueCopyMin]).
const DefaultEnqueueCopyMin = 300

// The COPY path of an enqueue (see "Bulk enqueue" in the package doc). It
// writes what the INSERT of enqueueSQL or insertClaimedSQL writes, row for
// row, in the same order, into the same tables, whose triggers and
// constraints check and order the rows as they do the INSERT's:
//
//   - an enqueue that fails on duplicates takes its row ids from the
//     table's sequence first (rowIDsSQL), then copies each event id beside
//     its row id into the event id table, whose primary key refuses a
//     duplicate as the INSERT's does (the COPY fails, which aborts the
//     transaction), then copies the rows;
//   - an enqueue that skips duplicates takes its ids with claimEventIDsSQL
//     as before, and copies the rows of the ids it took.
//
// Rows go in in key order and, within a key, in the order given, as the
// INSERT's ORDER BY e.key, e.n puts them: the keys are sorted by the
// database (rowIDsSQL), in its collation, so that a COPY takes its keys'
// commit-time locks in the order every other enqueue does. An event
// without RunAt is due at the database's time: the column is left to its
// default, statement_timestamp(), the COPY's, as the INSERT's COALESCE
// gives the INSERT's.

// rowIDsSQL takes $1 row ids from the table's identity sequence, in
// increasing order, and returns them, then the order of the keys $2 as
// the enqueue's INSERT sorts them (positions in $2, from 1), each list as
// text of comma-separated numbers: one row whatever the driver can scan.
// It reads no table.
const rowIDsSQL = `SELECT array_to_string(ARRAY(SELECT ` + nextRowID + ` FROM generate_series(1, $1::int)), ','),
    array_to_string(ARRAY(SELECT k.n FROM unnest($2::text[]) WITH ORDINALITY AS k(key, n) ORDER BY k.key), ',')`

// copiedSQL reads which of the row ids $1 are in the table: after a COPY
// that took fewer rows than it was given, which of its events are there.
// The rows are read through the primary key (invariant 11).
const copiedSQL = `SELECT id FROM {{table}} WHERE id = ANY ($1::bigint[])`

// copyStatements are the COPY path's statements and the tables it copies
// into, rendered for one store.
type copyStatements struct {
	rowIDs, copied  string
	table, eventIDs []string // schema and name, unquoted, as leasework.CopyTx takes them
}

func (s *Store) renderCopyStatements() copyStatements {
	return copyStatements{
		rowIDs:   s.render(rowIDsSQL),
		copied:   s.render(copiedSQL),
		table:    []string{s.schema, s.table},
		eventIDs: []string{s.schema, s.objectName("event_ids")},
	}
}

// eventIDColumns are the columns an enqueue copies into the event id
// table.
var eventIDColumns = []string{"event_id", "id"}

// copyTx returns tx as a leasework.CopyTx when the store copies a batch of
// n events in it: n is at least the store's EnqueueCopyMin, and tx can
// COPY (a leasework.CopyTx itself, or a *sql.Tx wrapped by the store whose
// driver is a leasework.Copier). Otherwise nil: the INSERT.
func (s *Store) copyTx(tx leasework.Tx, n int) leasework.CopyTx {
	if s.copyMin <= 0 || n < s.copyMin {
		return nil
	}
	c, _ := tx.(leasework.CopyTx)
	return c
}

// insertNew inserts the events of cols, whose ids are new or the call
// fails with leasework.ErrDuplicateEvent: with COPY when tx can and the
// batch is large enough, else with enqueueSQL.
func (s *Store) insertNew(ctx context.Context, tx leasework.Tx, out []Enqueued, first map[string]int, cols columns) error {
	if c := s.copyTx(tx, len(cols.ids)); c != nil {
		if runAt, ok := copiedRunAt(cols.runAt); ok {
			return s.copyNew(ctx, c, out, first, cols, runAt)
		}
	}
	return s.insert(ctx, tx, s.q.enqueue, out, first, cols.args()...)
}

// insertTaken inserts the events of fresh with the row ids their event
// ids took (claimEventIDsSQL), with COPY when tx can and the batch is
// large enough, else with insertClaimedSQL. The COPY puts the rows in the
// order of their row ids, which the ids' one taking statement gave in key
// order: ids taken by more than one (some freed while the call ran) go in
// with the INSERT, which sorts them by key itself.
func (s *Store) insertTaken(ctx context.Context, tx leasework.Tx, out []Enqueued, first map[string]int, fresh columns, rowIDs []int64, oneTake bool) error {
	if c := s.copyTx(tx, len(fresh.ids)); c != nil && oneTake {
		if runAt, ok := copiedRunAt(fresh.runAt); ok {
			order := make([]int, len(rowIDs))
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rowIDs[a], rowIDs[b]) })
			return s.copyRows(ctx, c, out, first, fresh, order, rowIDs, runAt)
		}
	}
	return s.insert(ctx, tx, s.q.insertClaimed, out, first, append([]any{rowIDs}, fresh.args()...)...)
}

// copyNew copies the events of cols, whose ids must be new: it takes their
// row ids and the database's order of their keys, copies the event ids,
// then the rows.
func (s *Store) copyNew(ctx context.Context, tx leasework.CopyTx, out []Enqueued, first map[string]int, cols columns, runAt []time.Time) error {
	n := len(cols.ids)
	var keys []string // distinct, when any is not empty
	seen := map[string]bool{}
	for _, k := range cols.keys {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 1 && keys[0] == "" {
		keys = nil
	}
	rows, err := tx.Query(ctx, s.cq.rowIDs, int64(n), append([]string{}, keys...))
	if err != nil {
		return s.enqueueError(tx, err)
	}
	var idsText, ranksText string
	for rows.Next() {
		if err := rows.Scan(&idsText, &ranksText); err != nil {
			rows.Close()
			return s.wrapErrState(tx.SQLState, "enqueue", err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.enqueueError(tx, err)
	}
	ids, err1 := numbers(idsText)
	keyOrder, err2 := numbers(ranksText)
	if err1 != nil || err2 != nil || len(ids) != n || len(keyOrder) != len(keys) {
		return fmt.Errorf("lease: enqueue: the database returned row ids %.40q and key order %.40q for %d events and %d keys", idsText, ranksText, n, len(keys))
	}
	slices.Sort(ids) // taken in increasing order, and so given

	// The insertion order: by the keys' rank, then as given. The empty
	// key (no key) is ranked with the others, first in any collation.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	if keys != nil {
		rank := make(map[string]int, len(keys))
		for r, k := range keyOrder {
			if k < 1 || k > int64(len(keys)) {
				return fmt.Errorf("lease: enqueue: the database returned key position %d of %d", k, len(keys))
			}
			rank[keys[k-1]] = r
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rank[cols.keys[a]], rank[cols.keys[b]]) })
	}
	rowIDs := make([]int64, n) // by event, in cols' order
	buf := takeCopyBuffer(n, len(eventIDColumns))
	for r, i := range order {
		rowIDs[i] = ids[r]
		buf.rows[r][0], buf.rows[r][1] = cols.ids[i], ids[r]
	}
	_, err = tx.CopyFrom(ctx, s.cq.eventIDs, eventIDColumns, buf.rows)
	buf.give()
	if err != nil {
		return s.enqueueError(tx, err)
	}
	return s.copyRows(ctx, tx, out, first, cols, order, rowIDs, runAt)
}

// copyBuffer holds the rows of one COPY, each a slice of one array of
// values, and is kept for the next COPY (copyBuffers): a batch of 5,000
// events is 45,000 values, which, allocated afresh for each COPY, the
// runtime zeroed, collected and gave back to the system each time. A
// leasework.CopyTx keeps neither slice after its call.
type copyBuffer struct {
	values []any
	rows   [][]any
}

var copyBuffers sync.Pool

// takeCopyBuffer returns a buffer of n rows of width values each.
func takeCopyBuffer(n, width int) *copyBuffer {
	b, _ := copyBuffers.Get().(*copyBuffer)
	if b == nil {
		b = &copyBuffer{}
	}
	if cap(b.values) < n*width {
		b.values = make([]any, n*width)
	}
	if cap(b.rows) < n {
		b.rows = make([][]any, n)
	}
	b.values, b.rows = b.values[:n*width], b.rows[:n]
	for r := range b.rows {
		b.rows[r] = b.values[r*width : (r+1)*width : (r+1)*width]
	}
	return b
}

// give clears the buffer, so that it holds on to no event's values, and
// keeps it for the next COPY.
func (b *copyBuffer) give() {
	clear(b.values)
	copyBuffers.Put(b)
}

// lastBox boxes values as any, reusing the box of the value before when
// the next is equal: a batch's kinds, queues, budgets and priorities are
// mostly one value each, and each box is an allocation.
type lastBox[T comparable] struct {
	v   T
	box any
}

func (b *lastBox[T]) of(v T) any {
	if b.box == nil || b.v != v {
		b.v, b.box = v, v
	}
	return b.box
}

// copyRows copies the rows of cols, in order (indexes into cols), with
// their row ids rowIDs (by index), and records the ids of the events
// copied. runAt is each event's due time, or nil for every event due at
// the database's time.
func (s *Store) copyRows(ctx context.Context, tx leasework.CopyTx, out []Enqueued, first map[string]int, cols columns, order []int, rowIDs []int64, runAt []time.Time) error {
	columns := []string{"id", "event_id", "kind", "key", "payload", "max_attempts", "queue", "priority", "metadata"}
	if runAt != nil {
		columns = append(columns, "next_attempt_at")
	}
	partitioned := slices.ContainsFunc(cols.partitions, func(p string) bool { return p != "" })
	if partitioned {
		columns = append(columns, "partition_key")
	}
	costly := slices.ContainsFunc(cols.costs, func(c int64) bool { return c != 1 })
	if costly {
		columns = append(columns, "cost")
	}
	buf := takeCopyBuffer(len(order), len(columns))
	defer buf.give()
	var kind, queue lastBox[string]
	var attempts, priority lastBox[int64]
	for r, i := range order {
		row := buf.rows[r]
		row[0], row[1], row[2], row[3] = rowIDs[i], cols.ids[i], kind.of(cols.kinds[i]), nullIfEmpty(cols.keys[i])
		row[4], row[5], row[6], row[7] = cols.payloads[i], attempts.of(cols.maxAtt[i]), queue.of(cols.queues[i]), priority.of(cols.priorities[i])
		row[8] = nullIfEmpty(cols.metadata[i])
		if runAt != nil {
			row[9] = runAt[i]
		}
		next := 9
		if runAt != nil {
			next++
		}
		if partitioned {
			row[next] = nullIfEmpty(cols.partitions[i])
			next++
		}
		if costly {
			row[next] = cols.costs[i]
		}
	}
	n, err := tx.CopyFrom(ctx, s.cq.table, columns, buf.rows)
	if err != nil {
		return s.enqueueError(tx, err)
	}
	if n == int64(len(order)) {
		for _, i := range order {
			out[first[cols.ids[i]]].ID = rowIDs[i]
		}
		return nil
	}
	// Fewer rows than given: a trigger dropped some. The events whose rows
	// are there get their ids; accountForEvery names the first other.
	byID := make(map[int64]string, len(order))
	ids := make([]int64, 0, len(order))
	for _, i := range order {
		byID[rowIDs[i]] = cols.ids[i]
		ids = append(ids, rowIDs[i])
	}
	found, err := tx.Query(ctx, s.cq.copied, ids)
	if err != nil {
		return s.enqueueError(tx, err)
	}
	defer found.Close()
	for found.Next() {
		var id int64
		if err := found.Scan(&id); err != nil {
			return s.wrapErrState(tx.SQLState, "enqueue", err)
		}
		out[first[byID[id]]].ID = id
	}
	if err := found.Err(); err != nil {
		return s.enqueueError(tx, err)
	}
	return nil
}

// copiedRunAt returns the due times of a batch to copy, from the text the
// INSERT sends (runAt, "" for none): nil when no event has one, so that
// every row takes the column's default, the database's time. A batch that
// mixes events with and without a due time is not copied (false): the
// INSERT gives those without one the database's time of its own
// statement, and so the rows of one batch the same.
func copiedRunAt(runAt []string) ([]time.Time, bool) {
	set := 0
	for _, at := range runAt {
		if at != "" {
			set++
		}
	}
	switch set {
	case 0:
		return nil, true
	case len(runAt):
	default:
		return nil, false
	}
	times := make([]time.Time, len(runAt))
	for i, at := range runAt {
		t, err := serverTime(at)
		if err != nil {
			return nil, false
		}
		times[i] = t
	}
	return times, true
}

// serverTime is the timestamptz that the server makes of at, a time in
// UTC as RFC 3339 text with up to nine digits of a second (the INSERT's
// parameter): it reads the fraction as a double and rounds it to the
// microsecond, halves to even (rint in timestamptz_in). A COPY sends the
// time itself, and pgx in binary, to the microsecond: rounded so first,
// the row holds what the INSERT's would.
func serverTime(at string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, err
	}
	var frac float64
	if dot := strings.IndexByte(at, '.'); dot >= 0 && strings.HasSuffix(at, "Z") {
		frac, err = strconv.ParseFloat("0"+at[dot:len(at)-1], 64)
		if err != nil {
			return time.Time{}, err
		}
	}
	us := math.RoundToEven(frac * 1e6)
	return t.Add(-time.Duration(t.Nanosecond())).Add(time.Duration(us) * time.Microsecond).UTC(), nil
}

// numbers parses text of comma-separated integers ("" is none).
func numbers(text string) ([]int64, error) {
	if text == "" {
		return nil, nil
	}
	fields := strings.Split(text, ",")
	out := make([]int64, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// nullIfEmpty is s, or nil (NULL) for the empty text, as the INSERT's
// NULLIF(…, ”) stores it.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// sqlCopyTx is a *sql.Tx of a driver that can COPY, as a
// leasework.CopyTx.
type sqlCopyTx struct {
	sqlTx
	tx     *sql.Tx
	copier leasework.Copier
}

func (t sqlCopyTx) CopyFrom(ctx context.Context, table, columns []string, rows [][]any) (int64, error) {
	return t.copier.CopyFrom(ctx, t.tx, table, columns, rows)
}
