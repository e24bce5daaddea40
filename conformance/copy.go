package conformance

import (
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// Properties of the driver's COPY (leasework.Copier), with which the lease
// store writes large batches enqueued in a *sql.Tx.
func copyProperties() []property {
	return []property{
		{"CopiedEnqueueKeepsEnqueuesPromises", copiedEnqueueKeepsEnqueuesPromises},
	}
}

// An enqueue copied through the driver's leasework.Copier (a store with
// lease.Options.EnqueueCopyMin 1) keeps the promises of one that inserts:
// each row holds its event as given (texts a COPY must escape, bytes, a
// key, metadata, a due time to the microsecond); an event id that exists
// is leasework.ErrDuplicateEvent (the driver's error carries its
// SQLSTATE) and changes nothing; skipping duplicates copies the others; a
// rolled-back enqueue leaves nothing; an event the table dropped without
// an error fails the call, naming it (the driver counts the rows the
// table took). Skipped when the driver is no leasework.Copier.
func copiedEnqueueKeepsEnqueuesPromises(e *env) {
	if _, ok := e.target.Driver.(leasework.Copier); !ok {
		e.t.Skip("optional capability: the driver does not implement leasework.Copier (every enqueue sends one INSERT)")
	}
	s, err := lease.New(e.db, e.target.Driver, lease.Options{Schema: e.schema, EnqueueCopyMin: 1})
	wantOK(e.t, "lease.New", err)
	due := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	events := []lease.Event{
		{Kind: "k", EventID: "tab\tnew\nline back\\slash", Payload: []byte("\x00\t\n\\\xff"), Key: "key\tone",
			Metadata: map[string]string{"tenant": "a\tb\\c\nd"}, RunAt: due, Queue: "q", Priority: 3, MaxAttempts: 4},
		{Kind: "k", EventID: `\N`, Payload: nil, Key: "", RunAt: due.Add(time.Second)},
	}
	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	out, err := s.Enqueue(e.ctx, tx, events...)
	wantOK(e.t, "copied enqueue", err)
	wantOK(e.t, "commit", tx.Commit())
	for i, ev := range events {
		r := e.row(out[i].ID)
		if r.EventID != ev.EventID || r.Kind != ev.Kind || string(r.Payload) != string(ev.Payload) || r.Key != ev.Key ||
			!r.NextAttemptAt.Equal(ev.RunAt) || !maps.Equal(r.Metadata, ev.Metadata) || r.Status != leasework.StatusReady {
			e.t.Errorf("copied event %d: row %+v; want the event as given %+v", i, r, ev)
		}
	}
	if r := e.row(out[0].ID); r.Queue != "q" || r.Priority != 3 || r.MaxAttempts != 4 {
		e.t.Errorf("copied event 0: queue %q, priority %d, attempts %d; want q, 3, 4", r.Queue, r.Priority, r.MaxAttempts)
	}

	tx, err = e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	_, err = s.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "fresh"}, lease.Event{Kind: "k", EventID: `\N`, Payload: []byte("again")})
	tx.Rollback()
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		e.t.Errorf("copied enqueue of an existing event id: %v; want leasework.ErrDuplicateEvent (is the SQLSTATE of the driver's COPY error read by its SQLState?)", err)
	}
	if _, err := e.fix.GetByEventID(e.ctx, "fresh"); !errors.Is(err, lease.ErrNotFound) {
		e.t.Errorf("event fresh of the refused copy: %v; want no row", err)
	}
	if r := e.row(out[1].ID); len(r.Payload) != 0 {
		e.t.Errorf("the existing row after a duplicate: payload %q; want it unchanged", r.Payload)
	}

	tx, err = e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	_, err = s.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "rolled back"})
	wantOK(e.t, "copied enqueue", err)
	wantOK(e.t, "rollback", tx.Rollback())
	if _, err := e.fix.GetByEventID(e.ctx, "rolled back"); !errors.Is(err, lease.ErrNotFound) {
		e.t.Errorf("a rolled-back copied event: %v; want no row", err)
	}

	tx, err = e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	skipped, err := s.EnqueueWith(e.ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{Kind: "k", EventID: `\N`}, lease.Event{Kind: "k", EventID: "new"})
	wantOK(e.t, "copied enqueue skipping duplicates", err)
	wantOK(e.t, "commit", tx.Commit())
	if !skipped[0].Duplicate || skipped[1].Duplicate || skipped[1].ID == 0 || e.row(skipped[1].ID).EventID != "new" {
		e.t.Errorf("copied enqueue skipping duplicates: %+v; want the existing id Duplicate, new copied", skipped)
	}

	wantOK(e.t, "install the trigger", leasetest.DropInsertsOfKind(e.ctx, e.fix, "vanish"))
	for _, skip := range []bool{false, true} {
		tx, err := e.db.BeginTx(e.ctx, nil)
		wantOK(e.t, "begin", err)
		out, err := s.EnqueueWith(e.ctx, tx, lease.EnqueueOptions{SkipDuplicates: skip},
			lease.Event{Kind: "k", EventID: "kept"}, lease.Event{Kind: "vanish", EventID: "dropped"})
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), `event 1 (event id "dropped")`) {
			e.t.Errorf("SkipDuplicates %v: copied enqueue of an event the table dropped = %+v, %v; want an error naming event 1 (\"dropped\")", skip, out, err)
		}
	}
}
