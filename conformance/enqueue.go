package conformance

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// Properties of enqueue: what it reports for each event it is given.
func enqueueProperties() []property {
	return []property{
		{"InCallDuplicateKeepsTheFirst", inCallDuplicateKeepsTheFirst},
		{"EnqueueAccountsForEveryEvent", enqueueAccountsForEveryEvent},
		{"EnqueueRefusesTextPostgreSQLCannotStore", enqueueRefusesTextPostgreSQLCannotStore},
	}
}

// Skipping duplicates, an event id given twice in one call is inserted
// once, from its first event (whose payload is stored), and the later ones
// are reported Duplicate; an id that already exists is Duplicate wherever it
// appears.
func inCallDuplicateKeepsTheFirst(e *env) {
	e.enqueue(lease.Event{Kind: "k", EventID: "old", Payload: []byte("stored before")})
	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	defer tx.Rollback()
	out, err := e.store.EnqueueWith(e.ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{Kind: "k", EventID: "twice", Payload: []byte("first")},
		lease.Event{Kind: "k", EventID: "old", Payload: []byte("again")},
		lease.Event{Kind: "k", EventID: "twice", Payload: []byte("second")},
		lease.Event{Kind: "k", EventID: "new"},
		lease.Event{Kind: "k", EventID: "old"},
	)
	wantOK(e.t, "enqueue with in-call duplicates", err)
	wantOK(e.t, "commit", tx.Commit())
	want := []struct {
		eventID   string
		inserted  bool
		duplicate bool
	}{{"twice", true, false}, {"old", false, true}, {"twice", false, true}, {"new", true, false}, {"old", false, true}}
	if len(out) != len(want) {
		e.t.Fatalf("enqueue reported %d events, want %d: %+v", len(out), len(want), out)
	}
	for i, w := range want {
		if out[i].EventID != w.eventID || (out[i].ID != 0) != w.inserted || out[i].Duplicate != w.duplicate {
			e.t.Errorf("event %d = %+v; want event id %s, inserted %v, duplicate %v", i, out[i], w.eventID, w.inserted, w.duplicate)
		}
	}
	r, err := e.fix.GetByEventID(e.ctx, "twice")
	wantOK(e.t, "read", err)
	if r.ID != out[0].ID || string(r.Payload) != "first" {
		e.t.Errorf("stored row %d with payload %q; want row %d (the first event) with payload \"first\"", r.ID, r.Payload, out[0].ID)
	}
	if r, err := e.fix.GetByEventID(e.ctx, "old"); err != nil || string(r.Payload) != "stored before" {
		e.t.Errorf("existing row: %+v, %v; want it unchanged", r, err)
	}
}

// Every event given is accounted for: inserted, or (skipping duplicates)
// found to exist. A row that vanished without an error (here a trigger drops
// it) fails the call, naming the event; it is never a silent gap.
func enqueueAccountsForEveryEvent(e *env) {
	wantOK(e.t, "install the trigger", leasetest.DropInsertsOfKind(e.ctx, e.fix, "vanish"))
	for _, skip := range []bool{false, true} {
		tx, err := e.db.BeginTx(e.ctx, nil)
		wantOK(e.t, "begin", err)
		out, err := e.store.EnqueueWith(e.ctx, tx, lease.EnqueueOptions{SkipDuplicates: skip},
			lease.Event{Kind: "k", EventID: "kept"},
			lease.Event{Kind: "vanish", EventID: "dropped"},
		)
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), "event 1") || !strings.Contains(err.Error(), `"dropped"`) {
			e.t.Errorf("SkipDuplicates %v: enqueue of an event the table dropped = %+v, %v; want an error naming event 1 (\"dropped\")", skip, out, err)
		}
	}
}

// Text PostgreSQL cannot store (a NUL byte, invalid UTF-8) or over the
// documented sizes is refused before anything is sent, with an error that
// names the event and the field; the transaction stays usable.
func enqueueRefusesTextPostgreSQLCannotStore(e *env) {
	cases := []struct {
		event lease.Event
		want  string
	}{
		{lease.Event{Kind: "bad\x00kind"}, "event 1: Kind"},
		{lease.Event{Kind: "bad \xff kind"}, "event 1: Kind"},
		{lease.Event{Kind: strings.Repeat("k", lease.MaxKindBytes+1)}, "event 1: Kind"},
		{lease.Event{Kind: "k", EventID: "nul\x00id"}, "event 1: EventID"},
		{lease.Event{Kind: "k", EventID: "\xc3("}, "event 1: EventID"},
		{lease.Event{Kind: "k", EventID: strings.Repeat("i", lease.MaxEventIDBytes+1)}, "event 1: EventID"},
		{lease.Event{Kind: "k", Key: "nul\x00key"}, "event 1: Key"},
		{lease.Event{Kind: "k", Key: "\xe2\x82"}, "event 1: Key"},
		{lease.Event{Kind: "k", Key: strings.Repeat("x", lease.MaxKeyBytes+1)}, "event 1: Key"},
	}
	tx, err := e.db.BeginTx(e.ctx, nil)
	wantOK(e.t, "begin", err)
	defer tx.Rollback()
	for _, c := range cases {
		_, err := e.store.Enqueue(e.ctx, tx, lease.Event{Kind: "k"}, c.event)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			e.t.Errorf("enqueue of %.80q: %v; want an error naming %q", fmt.Sprintf("%+v", c.event), err, c.want)
		}
		if errors.Is(err, leasework.ErrDuplicateEvent) {
			e.t.Errorf("enqueue of %.80q: %v; a bad value is not a duplicate", fmt.Sprintf("%+v", c.event), err)
		}
	}
	// Nothing reached the server: the transaction is not aborted.
	out, err := e.store.Enqueue(e.ctx, tx, lease.Event{Kind: "k", EventID: "after", Key: "€ key"})
	wantOK(e.t, "enqueue after the refused ones", err)
	wantOK(e.t, "commit", tx.Commit())
	if r := e.row(out[0].ID); r.EventID != "after" || r.Key != "€ key" {
		e.t.Fatalf("row = %+v", r)
	}
}
