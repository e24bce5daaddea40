package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// enqueueUnique enqueues e in a transaction of its own, skipping
// duplicates when skip, and returns its result.
func enqueueUnique(t *testing.T, s *lease.Store, skip bool, e lease.Event) (lease.Enqueued, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: skip}, e)
	if err != nil {
		return lease.Enqueued{}, err
	}
	return out[0], tx.Commit()
}

func countRows(t *testing.T, s *lease.Store) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM ` + s.QualifiedTable()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Events unique by their arguments: the same arguments, however spelled,
// are one event, and a second enqueue gets the duplicate results of an
// event id; arguments that differ in a field the key names, a queue under
// ByQueue, a period under ByPeriod, or a kind are new events.
func TestUniqueByArguments(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		byArgs := &lease.Unique{ByArgs: true}
		first, err := enqueueUnique(t, s, false, lease.Event{Kind: "mail", Payload: []byte(`{"to":"a@x","n":1}`), Unique: byArgs})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(first.EventID, "unique:mail:") {
			t.Errorf("derived event id %q; want it to start with unique:mail:", first.EventID)
		}
		same := lease.Event{Kind: "mail", Payload: []byte(` { "n" : 1, "to":"a@x" }`), Unique: byArgs}
		if _, err := enqueueUnique(t, s, false, same); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("the same arguments again: %v; want ErrDuplicateEvent", err)
		}
		if got, err := enqueueUnique(t, s, true, same); err != nil || !got.Duplicate || got.EventID != first.EventID {
			t.Errorf("the same arguments again, skipping duplicates: %+v, %v; want a duplicate of %q", got, err, first.EventID)
		}
		for _, e := range []lease.Event{
			{Kind: "mail", Payload: []byte(`{"to":"b@x","n":1}`), Unique: byArgs},
			{Kind: "sms", Payload: []byte(`{"to":"a@x","n":1}`), Unique: byArgs},
			{Kind: "mail", Payload: []byte(`not json`), Unique: byArgs},
			{Kind: "mail", Payload: []byte(`{"to":"a@x","n":1}`), Queue: "other", Unique: &lease.Unique{ByArgs: true, ByQueue: true}},
		} {
			if got, err := enqueueUnique(t, s, true, e); err != nil || got.Duplicate {
				t.Errorf("%s %s in %q: %+v, %v; want a new event", e.Kind, e.Payload, e.Queue, got, err)
			}
		}
		// Without ByQueue the queue is not part of the key.
		if got, err := enqueueUnique(t, s, true, lease.Event{Kind: "mail", Payload: []byte(`{"to":"a@x","n":1}`), Queue: "other", Unique: byArgs}); err != nil || !got.Duplicate {
			t.Errorf("the same arguments in another queue, not by queue: %+v, %v; want a duplicate", got, err)
		}
		// ArgKeys: only the fields named count.
		sub := &lease.Unique{ByArgs: true, ArgKeys: []string{"user"}}
		if got, err := enqueueUnique(t, s, true, lease.Event{Kind: "sync", Payload: []byte(`{"user":7,"at":"09:00"}`), Unique: sub}); err != nil || got.Duplicate {
			t.Fatalf("first sync: %+v, %v", got, err)
		}
		if got, err := enqueueUnique(t, s, true, lease.Event{Kind: "sync", Payload: []byte(`{"at":"10:00","user":7}`), Unique: sub}); err != nil || !got.Duplicate {
			t.Errorf("sync of the same user at another time: %+v, %v; want a duplicate", got, err)
		}
		if got, err := enqueueUnique(t, s, true, lease.Event{Kind: "sync", Payload: []byte(`{"user":8,"at":"09:00"}`), Unique: sub}); err != nil || got.Duplicate {
			t.Errorf("sync of another user: %+v, %v; want a new event", got, err)
		}
		// ByPeriod: by the event's RunAt, or the producer's clock.
		hour := &lease.Unique{ByPeriod: time.Hour}
		at := time.Date(2026, 12, 6, 9, 10, 0, 0, time.UTC)
		for _, c := range []struct {
			at  time.Time
			dup bool
		}{{at, false}, {at.Add(40 * time.Minute), true}, {at.Add(55 * time.Minute), false}} {
			got, err := enqueueUnique(t, s, true, lease.Event{Kind: "report", RunAt: c.at, Unique: hour})
			if err != nil || got.Duplicate != c.dup {
				t.Errorf("report run at %v: %+v, %v; want duplicate %v", c.at, got, err, c.dup)
			}
		}
		if n := countRows(t, s); n != 9 {
			t.Errorf("%d rows; want 9", n)
		}
	})
}

// Concurrent enqueues of the same arguments, each in its own transaction,
// make one row; every other gets a duplicate result.
func TestUniqueUnderConcurrency(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		const producers = 8
		var wg sync.WaitGroup
		results := make([]lease.Enqueued, producers)
		errs := make([]error, producers)
		start := make(chan struct{})
		for i := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = enqueueUnique(t, s, i%2 == 0, lease.Event{Kind: "k", Payload: []byte(`{"order":42}`),
					Unique: &lease.Unique{ByArgs: true}})
			}()
		}
		close(start)
		wg.Wait()
		made := 0
		for i := range producers {
			switch {
			case errs[i] == nil && !results[i].Duplicate:
				made++
			case errs[i] == nil && results[i].Duplicate:
			case errors.Is(errs[i], leasework.ErrDuplicateEvent) && i%2 == 1:
			default:
				t.Errorf("producer %d: %+v, %v; want a new event, a duplicate, or ErrDuplicateEvent", i, results[i], errs[i])
			}
		}
		if n := countRows(t, s); made != 1 || n != 1 {
			t.Errorf("%d producers made the event, %d rows; want one each", made, n)
		}
	})
}

// Bad Unique input is refused before anything is sent, naming the event.
func TestUniqueInputIsChecked(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	for _, c := range []struct {
		e    lease.Event
		want string
	}{
		{lease.Event{Kind: "k", EventID: "x", Unique: &lease.Unique{}}, "both EventID and Unique"},
		{lease.Event{Kind: "k", Unique: &lease.Unique{ArgKeys: []string{"a"}}}, "without Unique.ByArgs"},
		{lease.Event{Kind: "k", Payload: []byte(`[1]`), Unique: &lease.Unique{ByArgs: true, ArgKeys: []string{"a"}}}, "JSON object"},
		{lease.Event{Kind: "k", Payload: []byte(`nope`), Unique: &lease.Unique{ByArgs: true, ArgKeys: []string{"a"}}}, "JSON object"},
		{lease.Event{Kind: "k", Unique: &lease.Unique{ByPeriod: -time.Second}}, "is negative"},
	} {
		_, err := enqueueUnique(t, s, false, c.e)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "event 0") {
			t.Errorf("%+v: %v; want an error about event 0 containing %q", c.e.Unique, err, c.want)
		}
	}
	if n := countRows(t, s); n != 0 {
		t.Errorf("%d rows after refused enqueues; want none", n)
	}
}

// ReleaseOn frees an event's arguments as it ends in a status named, in
// the transaction that ends it: the same arguments then make a new event,
// which keeps them even when retention deletes the first row; a status not
// named keeps them taken.
func TestUniqueReleaseOn(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		done := &lease.Unique{ByArgs: true, ReleaseOn: []leasework.Status{leasework.StatusDone}}
		ev := func(order string) lease.Event {
			return lease.Event{Kind: "k", Payload: []byte(`{"order":` + order + `}`), Unique: done}
		}
		first, err := enqueueUnique(t, s, true, ev("1"))
		if err != nil || !strings.HasSuffix(first.EventID, "~D") {
			t.Fatalf("first: %+v, %v; want an id ending ~D", first, err)
		}
		failing, err := enqueueUnique(t, s, true, ev("2"))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := enqueueUnique(t, s, true, ev("1")); !got.Duplicate {
			t.Errorf("order 1 while pending: %+v; want a duplicate", got)
		}
		cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
		if err != nil || len(cs) != 2 {
			t.Fatalf("claim = %+v, %v", cs, err)
		}
		for _, c := range cs {
			w := lease.Complete(c.Ref())
			if c.ID == failing.ID {
				w = lease.Fail(c.Ref(), "declined")
			}
			if _, err := s.Write(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		second, err := enqueueUnique(t, s, true, ev("1"))
		if err != nil || second.Duplicate || second.ID == first.ID || second.EventID != first.EventID {
			t.Fatalf("order 1 after it was DONE: %+v, %v; want a new row with the same event id", second, err)
		}
		if got, _ := enqueueUnique(t, s, true, ev("2")); !got.Duplicate {
			t.Errorf("order 2 after it FAILED (not released on FAILED): %+v; want a duplicate", got)
		}
		if r, err := s.GetByEventID(ctx, first.EventID); err != nil || r.ID != second.ID {
			t.Errorf("GetByEventID = row %d, %v; want the new row %d", r.ID, err, second.ID)
		}
		// Retention deletes the first row: the second keeps the id.
		if _, err := s.DB().ExecContext(ctx, `DELETE FROM `+s.QualifiedTable()+` WHERE id = $1`, first.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := enqueueUnique(t, s, true, ev("1")); !got.Duplicate {
			t.Errorf("order 1 after the first row was deleted, the second pending: %+v; want a duplicate", got)
		}
		if n := countRows(t, s); n != 2 {
			t.Errorf("%d rows; want 2 (order 1's second, order 2)", n)
		}
		if _, err := enqueueUnique(t, s, false, lease.Event{Kind: "k", Unique: &lease.Unique{ReleaseOn: []leasework.Status{leasework.StatusReady}}}); err == nil || !strings.Contains(err.Error(), "not a finished one") {
			t.Errorf("ReleaseOn READY: %v; want an error saying it is not a finished status", err)
		}
	})
}
