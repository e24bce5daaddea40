package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An enqueue of one event goes in with a statement of its own (scalar
// parameters instead of arrays), as does one skipping duplicates; the row
// either writes is the row a batch writes for the same event: every
// field, the store's default budget, the due time, and the event id in the
// event id table beside the row's id.
func TestEnqueueOfOneEventWritesWhatABatchWrites(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{MaxAttempts: 7})
		runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		events := func(suffix string) []lease.Event {
			return []lease.Event{
				{EventID: "full" + suffix, Kind: "k", Key: "key" + suffix, Payload: []byte("p\x00q"), MaxAttempts: 3,
					RunAt: runAt, Queue: "q", Priority: 4, Metadata: map[string]string{"tenant": "acme", "trace": ""}},
				{EventID: "bare" + suffix, Kind: "k"},
			}
		}
		var one []lease.Enqueued
		for _, e := range events("-one") {
			one = append(one, pgtest.Enqueue(t, s, e)...)
		}
		var skip []lease.Enqueued
		for _, e := range events("-skip") {
			skip = append(skip, enqueueWith(t, s, lease.EnqueueOptions{SkipDuplicates: true}, e)...)
		}
		batch := pgtest.Enqueue(t, s, events("-batch")...)
		for i, alone := range slices.Concat(one, skip) {
			suffix := []string{"-one", "-skip"}[i/len(one)]
			i := i % len(one)
			a, b := get(t, s, alone.ID), get(t, s, batch[i].ID)
			if a.EventID != alone.EventID || b.EventID != batch[i].EventID || alone.Duplicate {
				t.Fatalf("rows %d and %d have event ids %q and %q; want %q and %q", alone.ID, batch[i].ID, a.EventID, b.EventID, alone.EventID, batch[i].EventID)
			}
			if strings.TrimSuffix(a.Key, suffix) != strings.TrimSuffix(b.Key, "-batch") {
				t.Errorf("event %d has key %q enqueued alone, %q in a batch", i, a.Key, b.Key)
			}
			if got, want := comparable(a), comparable(b); got != want {
				t.Errorf("event %d enqueued alone:\n%s\nin a batch:\n%s", i, got, want)
			}
			if i == 0 && !a.NextAttemptAt.Equal(runAt) {
				t.Errorf("the event enqueued alone is due at %v; want its RunAt %v", a.NextAttemptAt, runAt)
			}
			if i == 1 && (a.MaxAttempts != 7 || !a.NextAttemptAt.Equal(a.CreatedAt)) {
				t.Errorf("the bare event enqueued alone has budget %d, due %v, created %v; want the store's 7, due when created",
					a.MaxAttempts, a.NextAttemptAt, a.CreatedAt)
			}
		}
		for _, e := range slices.Concat(one, skip, batch) {
			var id int64
			err := s.DB().QueryRowContext(ctx, `SELECT id FROM `+eventIDs(s)+` WHERE event_id = $1`, e.EventID).Scan(&id)
			if err != nil || id != e.ID {
				t.Errorf("event id %q in the event id table: row %d, %v; want row %d", e.EventID, id, err, e.ID)
			}
		}
	})
}

// comparable is what an enqueue decides of a row, as text: all but its
// ids, key and times (which differ between the two enqueues).
func comparable(r lease.Row) string {
	return fmt.Sprintf("kind %q payload %q status %s generation %d attempt %d max attempts %d queue %q priority %d metadata %v worker %q last error %q",
		r.Kind, r.Payload, r.Status, r.Generation, r.Attempt, r.MaxAttempts, r.Queue, r.Priority, r.Metadata, r.Worker, r.LastError)
}

// enqueueWith enqueues events with opts in a transaction of their own, and
// commits it.
func enqueueWith(t *testing.T, s *lease.Store, opts lease.EnqueueOptions, events ...lease.Event) []lease.Enqueued {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := s.EnqueueWith(ctx, tx, opts, events...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

func get(t *testing.T, s *lease.Store, id int64) lease.Row {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get row %d: %v", id, err)
	}
	return r
}

func eventIDs(s *lease.Store) string {
	return lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_event_ids")
}

// One event keeps every refusal of a batch: a taken event id fails the
// statement with leasework.ErrDuplicateEvent (skipping duplicates, it is
// reported Duplicate and the row left as it was), a budget the column
// cannot hold fails it, and a row a caller's trigger drops is reported
// missing, leaving no event id behind (so the id can be enqueued again).
func TestEnqueueOfOneEventRefuses(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "taken"})
		inTx := func(e lease.Event) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := s.Enqueue(ctx, tx, e); err != nil {
				return err
			}
			return tx.Commit()
		}
		if err := inTx(lease.Event{Kind: "k", EventID: "taken"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("enqueue of a taken event id: %v; want leasework.ErrDuplicateEvent", err)
		}
		if err := inTx(lease.Event{Kind: "k", EventID: "huge", MaxAttempts: 1 << 40}); err == nil || drv.SQLState(err) != "22003" {
			t.Errorf("enqueue of a budget of 2^40: %v (SQLSTATE %q); want numeric_value_out_of_range (22003)", err, drv.SQLState(err))
		}

		out := enqueueWith(t, s, lease.EnqueueOptions{SkipDuplicates: true}, lease.Event{Kind: "other", EventID: "taken", Payload: []byte("new")})
		if len(out) != 1 || !out[0].Duplicate || out[0].ID != 0 {
			t.Errorf("enqueue skipping duplicates of a taken event id = %+v; want it a duplicate, not inserted", out)
		}
		if r, err := s.GetByEventID(ctx, "taken"); err != nil || r.Kind != "k" || len(r.Payload) != 0 {
			t.Errorf("the row of the taken id: %+v, %v; want it as first enqueued, kind k, no payload", r, err)
		}

		fn := lease.QuoteIdent(s.Schema()) + ".drop_inserts"
		for _, q := range []string{
			`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`,
			`CREATE TRIGGER drop_inserts BEFORE INSERT ON ` + s.QualifiedTable() + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
		} {
			if _, err := s.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		err := inTx(lease.Event{Kind: "k", EventID: "dropped"})
		if err == nil || !strings.Contains(err.Error(), `event 0 (event id "dropped") was not inserted`) {
			t.Errorf("enqueue of a row a trigger drops: %v; want it reported not inserted", err)
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true}, lease.Event{Kind: "k", EventID: "dropped"})
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), `event 0 (event id "dropped"): the id is recorded as taken by row`) {
			t.Errorf("enqueue skipping duplicates of a row a trigger drops: %v; want the id reported taken by a row that does not exist", err)
		}
		if _, err := s.DB().ExecContext(ctx, `DROP TRIGGER drop_inserts ON `+s.QualifiedTable()); err != nil {
			t.Fatal(err)
		}
		if err := inTx(lease.Event{Kind: "k", EventID: "dropped"}); err != nil {
			t.Errorf("enqueue of the id whose row a trigger dropped, once the trigger is gone: %v; want it inserted", err)
		}
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.QualifiedTable()).Scan(&n); err != nil || n != 2 {
			t.Errorf("the table holds %d rows (%v); want 2, taken and dropped", n, err)
		}
	})
}

// Every committed enqueue of one event notifies listeners at its commit,
// whatever came before it: after an idle gap, and two in quick succession
// from different transactions (each is told apart by its kind: PostgreSQL
// folds equal notifications of one transaction only). An enqueue rolled
// back notifies nobody.
func TestEnqueueOfOneEventNotifiesAtEveryCommit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s := pgtest.Store(t, drv, lease.Options{})
		n, ok := drv.(leasework.Notifier)
		if !ok {
			t.Fatalf("driver %s cannot listen", drv.Name())
		}
		l, err := n.Listen(ctx, s.DB(), s.Channel())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		next := func(what string) string {
			t.Helper()
			kind, err := l.Wait(ctx)
			if err != nil {
				t.Fatalf("waiting for the notification of %s: %v", what, err)
			}
			return kind
		}
		enqueueIn := func(kind string) *sql.Tx {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: kind}); err != nil {
				t.Fatal(err)
			}
			return tx
		}

		// One at a time: each commit is followed by its notification, the
		// second after the first was received and the listener went idle.
		for _, kind := range []string{"first", "after-a-gap"} {
			if err := enqueueIn(kind).Commit(); err != nil {
				t.Fatal(err)
			}
			if got := next(kind); got != kind {
				t.Fatalf("notification %q; want %q", got, kind)
			}
		}

		// Two transactions open at once, committed one right after the
		// other, and one rolled back between them.
		a, rolled, b := enqueueIn("a"), enqueueIn("rolled-back"), enqueueIn("b")
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := rolled.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := []string{next("a"), next("b")}; got[0] != "a" || got[1] != "b" {
			t.Fatalf("notifications %q; want [a b], one per commit in commit order, none for the rollback", got)
		}
		if err := enqueueIn("last").Commit(); err != nil {
			t.Fatal(err)
		}
		if got := next("last"); got != "last" {
			t.Fatalf("notification %q after the rollback's turn; want last (the rolled-back enqueue sent one)", got)
		}
	})
}
