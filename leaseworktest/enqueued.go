package leaseworktest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// EnqueuedOptions narrows the rows [RequireEnqueued] and its kin look for,
// beyond their kind. The zero value matches every row of the kind.
type EnqueuedOptions struct {
	// Queue, when set, is the events' queue ("default" for events enqueued
	// without one). Empty matches any queue.
	Queue string
	// Priority, when set, is the events' priority: new(0) for the
	// default, new(3) for 3. Nil matches any priority.
	Priority *int
	// Key, when set, is the events' ordering key. Empty matches any key,
	// and events without one.
	Key string
	// Status, when set, is the rows' status. Empty matches any: an event
	// enqueued in the transaction is READY (a keyed one becomes WAITING at
	// commit if its key is busy); one a worker took since may be in any
	// state.
	Status leasework.Status
	// Count, when positive, is how many rows must match, exactly. Zero
	// means at least one. [RequireNotEnqueued] ignores it.
	Count int
}

// RequireEnqueuedTx returns the rows of events of kind visible in tx that
// match opts (nil matches them all), in id order, and fails the test when
// none does, or when opts.Count is set and not as many do. tx is a
// transaction of any database library: s.WrapTx(tx) adapts a *sql.Tx,
// driver/pgx's WrapTx a pgx.Tx. Rows visible in tx are those it enqueued
// itself, uncommitted, and those committed before it looked: give each
// test a table of its own (a schema of its own), or expect what earlier
// tests left.
//
// The failure names what was looked for and lists the rows of the kind
// that did not match, with their queue, priority, key and status.
func RequireEnqueuedTx(t testing.TB, ctx context.Context, tx leasework.Tx, s *lease.Store, kind string, opts *EnqueuedOptions) []lease.Row {
	t.Helper()
	if tx == nil {
		t.Fatalf("leaseworktest: RequireEnqueuedTx: tx is nil")
	}
	return requireEnqueued(t, ctx, inTx(t, s, tx), "in the transaction", s, kind, opts)
}

// RequireEnqueued is [RequireEnqueuedTx] outside a transaction: it reads
// the rows committed in s's table, through s's pool.
func RequireEnqueued(t testing.TB, ctx context.Context, s *lease.Store, kind string, opts *EnqueuedOptions) []lease.Row {
	t.Helper()
	return requireEnqueued(t, ctx, committed(t, s), "in the table", s, kind, opts)
}

// RequireNotEnqueuedTx fails the test when a row of an event of kind
// visible in tx matches opts (nil: when there is any row of kind), and
// names the rows that do.
func RequireNotEnqueuedTx(t testing.TB, ctx context.Context, tx leasework.Tx, s *lease.Store, kind string, opts *EnqueuedOptions) {
	t.Helper()
	if tx == nil {
		t.Fatalf("leaseworktest: RequireNotEnqueuedTx: tx is nil")
	}
	requireNotEnqueued(t, ctx, inTx(t, s, tx), "in the transaction", s, kind, opts)
}

// RequireNotEnqueued is [RequireNotEnqueuedTx] outside a transaction, on
// the rows committed in s's table.
func RequireNotEnqueued(t testing.TB, ctx context.Context, s *lease.Store, kind string, opts *EnqueuedOptions) {
	t.Helper()
	requireNotEnqueued(t, ctx, committed(t, s), "in the table", s, kind, opts)
}

// Row is a row of a typed kind's event with its arguments decoded.
type Row[T any] struct {
	lease.Row
	Args T
}

// RequireEnqueuedKindTx is [RequireEnqueuedTx] for the events of k, their
// payloads decoded with k's codec. A payload that does not decode fails
// the test.
func RequireEnqueuedKindTx[T any](t testing.TB, ctx context.Context, tx leasework.Tx, s *lease.Store, k lease.Kind[T], opts *EnqueuedOptions) []Row[T] {
	t.Helper()
	return decodeRows(t, k, RequireEnqueuedTx(t, ctx, tx, s, k.Name, opts))
}

// RequireEnqueuedKind is [RequireEnqueued] for the events of k, their
// payloads decoded with k's codec.
func RequireEnqueuedKind[T any](t testing.TB, ctx context.Context, s *lease.Store, k lease.Kind[T], opts *EnqueuedOptions) []Row[T] {
	t.Helper()
	return decodeRows(t, k, RequireEnqueued(t, ctx, s, k.Name, opts))
}

func decodeRows[T any](t testing.TB, k lease.Kind[T], rows []lease.Row) []Row[T] {
	t.Helper()
	out := make([]Row[T], len(rows))
	for i, r := range rows {
		args, err := k.Decode(r.Payload)
		if err != nil {
			t.Fatalf("leaseworktest: row %d (event %q): %v", r.ID, r.EventID, err)
		}
		out[i] = Row[T]{Row: r, Args: args}
	}
	return out
}

// committed lists the rows committed in s's table.
func committed(t testing.TB, s *lease.Store) lister {
	t.Helper()
	if s == nil {
		t.Fatalf("leaseworktest: the store is nil")
	}
	return s.List
}

// inTx lists the rows s's table has as tx sees them.
func inTx(t testing.TB, s *lease.Store, tx leasework.Tx) lister {
	t.Helper()
	if s == nil {
		t.Fatalf("leaseworktest: the store is nil")
	}
	return func(ctx context.Context, req lease.ListRequest) ([]lease.Row, error) { return s.ListTx(ctx, tx, req) }
}

func requireEnqueued(t testing.TB, ctx context.Context, q lister, where string, s *lease.Store, kind string, opts *EnqueuedOptions) []lease.Row {
	t.Helper()
	o := options(t, opts)
	match, other := rowsOf(t, ctx, q, s, kind, o)
	switch {
	case len(match) == 0:
		t.Fatalf("leaseworktest: no event %s is %s%s", o.describe(kind), where, others(kind, other))
	case o.Count > 0 && len(match) != o.Count:
		t.Fatalf("leaseworktest: %s %s, want %d:%s%s", howMany(len(match), o.describe(kind)), where, o.Count, list(match), others(kind, other))
	}
	return match
}

func requireNotEnqueued(t testing.TB, ctx context.Context, q lister, where string, s *lease.Store, kind string, opts *EnqueuedOptions) {
	t.Helper()
	o := options(t, opts)
	if match, _ := rowsOf(t, ctx, q, s, kind, o); len(match) > 0 {
		t.Fatalf("leaseworktest: %s %s, want none:%s", howMany(len(match), o.describe(kind)), where, list(match))
	}
}

func options(t testing.TB, opts *EnqueuedOptions) EnqueuedOptions {
	t.Helper()
	if opts == nil {
		return EnqueuedOptions{}
	}
	switch {
	case opts.Count < 0:
		t.Fatalf("leaseworktest: EnqueuedOptions.Count is %d; it must be positive, or zero for at least one", opts.Count)
	case opts.Status != "" && !opts.Status.Valid():
		t.Fatalf("leaseworktest: EnqueuedOptions.Status %q is not a status", opts.Status)
	}
	return *opts
}

// matches reports whether r is a row o looks for.
func (o EnqueuedOptions) matches(r lease.Row) bool {
	return (o.Queue == "" || r.Queue == o.Queue) &&
		(o.Priority == nil || r.Priority == *o.Priority) &&
		(o.Key == "" || r.Key == o.Key) &&
		(o.Status == "" || r.Status == o.Status)
}

// describe says what o looks for, after "no event".
func (o EnqueuedOptions) describe(kind string) string {
	d := fmt.Sprintf("of kind %q", kind)
	if o.Queue != "" {
		d += fmt.Sprintf(" in queue %q", o.Queue)
	}
	if o.Priority != nil {
		d += fmt.Sprintf(" with priority %d", *o.Priority)
	}
	if o.Key != "" {
		d += fmt.Sprintf(" with key %q", o.Key)
	}
	if o.Status != "" {
		d += " in status " + string(o.Status)
	}
	return d
}

// howMany says "1 event <desc> is" or "n events <desc> are".
func howMany(n int, desc string) string {
	if n == 1 {
		return "1 event " + desc + " is"
	}
	return fmt.Sprintf("%d events %s are", n, desc)
}

// others lists the rows of kind that did not match, after the failure's
// first line.
func others(kind string, rows []lease.Row) string {
	if len(rows) == 0 {
		return fmt.Sprintf(" (nor any other of kind %q)", kind)
	}
	return fmt.Sprintf("; of kind %q it sees %d others:%s", kind, len(rows), list(rows))
}

// maxListed bounds the rows a failure lists.
const maxListed = 20

func list(rows []lease.Row) string {
	var b strings.Builder
	for i, r := range rows {
		if i == maxListed {
			fmt.Fprintf(&b, "\n\t... and %d more", len(rows)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n\trow %d: event %q queue %q priority %d", r.ID, r.EventID, r.Queue, r.Priority)
		if r.Key != "" {
			fmt.Fprintf(&b, " key %q", r.Key)
		}
		fmt.Fprintf(&b, " %s", r.Status)
	}
	return b.String()
}

// lister reads rows as lease.Store.List does, in a transaction or not.
type lister func(ctx context.Context, req lease.ListRequest) ([]lease.Row, error)

// rowsOf reads the rows of kind that list sees, in id order, and splits
// them into those o matches and the others.
func rowsOf(t testing.TB, ctx context.Context, list lister, s *lease.Store, kind string, o EnqueuedOptions) (match, other []lease.Row) {
	t.Helper()
	req := lease.ListRequest{Kind: kind, Limit: 1000}
	for {
		rows, err := list(ctx, req)
		if err != nil {
			t.Fatalf("leaseworktest: read the events of kind %q in %s: %v", kind, s.QualifiedTable(), err)
		}
		for _, r := range rows {
			if o.matches(r) {
				match = append(match, r)
			} else {
				other = append(other, r)
			}
		}
		if len(rows) < req.Limit {
			return match, other
		}
		req.AfterID = rows[len(rows)-1].ID
	}
}
