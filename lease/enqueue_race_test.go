package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestSkipDuplicatesEnqueueRacingRetention: an enqueue skipping duplicates
// finds an event id taken by a DONE row, and retention deletes that row,
// freeing the id, before the enqueue looks the id up to report the
// duplicate. The id is free: the enqueue takes it and inserts the event,
// and reports what happened (it used to fail with "neither inserted nor
// found ... does a trigger or rule drop rows?", which was false).
//
// The interleaving is made certain, not timed: a trigger of the test on
// the event id table holds the enqueue's first statement, after its insert
// found the duplicate, on an advisory lock the test holds until retention
// has committed.
//
// Both ways the enqueue goes: a batch (two statements: the ids taken,
// then the rows) and one event (one statement, which takes the id and
// inserts the row); and through every enqueue path, where the COPY path
// inserts ids taken in two tries with the INSERT, which sorts them by key
// (one event copied too: its store copies every batch).
func TestSkipDuplicatesEnqueueRacingRetention(t *testing.T) {
	for _, batch := range []bool{true, false} {
		name := "one-event"
		if batch {
			name = "batch"
		}
		t.Run(name, func(t *testing.T) { skipDuplicatesRacingRetention(t, batch) })
	}
}

func skipDuplicatesRacingRetention(t *testing.T, batch bool) {
	pgtest.EachEnqueuePath(t, func(t *testing.T, p pgtest.EnqueuePath) {
		s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		old := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "dup", Payload: []byte("old")})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim = %v, %v", claims, err)
		}
		if _, err := s.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
			t.Fatal(err)
		}

		key := rand.Int32()
		holder, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock(17, $1)", key); err != nil {
			t.Fatal(err)
		}
		fn := lease.QuoteIdent(s.Schema()) + ".hold_enqueue"
		for _, q := range []string{
			`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_advisory_xact_lock(17, ` + fmt.Sprint(key) + `); RETURN NULL; END $$`,
			`CREATE TRIGGER hold_enqueue AFTER INSERT ON ` + lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_event_ids") +
				` FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `()`,
		} {
			if _, err := s.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}

		type result struct {
			out []lease.Enqueued
			err error
		}
		done := make(chan result, 1)
		go func() {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer tx.Rollback()
			events := []lease.Event{{Kind: "k", EventID: "dup", Payload: []byte("new")}}
			if batch {
				events = append([]lease.Event{{Kind: "k", EventID: "fresh"}}, events...)
			}
			out, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true}, events...)
			if err == nil {
				err = tx.Commit()
			}
			done <- result{out, err}
		}()

		// The enqueue's first statement waits on the lock.
		for {
			var waiting bool
			if err := s.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
				WHERE locktype = 'advisory' AND NOT granted AND classid = 17 AND objid = $1::int::oid AND objsubid = 2)`, key).Scan(&waiting); err != nil {
				t.Fatalf("waiting for the enqueue to be held by the test's trigger: %v", err)
			}
			if waiting {
				break
			}
			select {
			case r := <-done:
				t.Fatalf("the enqueue ended (%+v, %v) before the test's trigger held it", r.out, r.err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		if n, err := s.DeleteFinished(ctx, 0, 10); err != nil || n != 1 {
			t.Fatalf("retention deleted %d rows, %v; want the DONE row", n, err)
		}
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock(17, $1)", key); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("enqueue racing retention: %v", r.err)
		}
		want := 1
		if batch {
			want = 2
		}
		if len(r.out) != want || slices.ContainsFunc(r.out, func(e lease.Enqueued) bool { return e.Duplicate || e.ID == 0 || e.ID == old[0].ID }) {
			t.Fatalf("enqueue racing retention = %+v; want every event inserted, dup as a new row", r.out)
		}
		dup := r.out[len(r.out)-1]
		row, err := s.GetByEventID(ctx, "dup")
		if err != nil || row.ID != dup.ID || string(row.Payload) != "new" || row.Status != leasework.StatusReady {
			t.Errorf("row of dup: %+v, %v; want the new event, READY, as row %d", row, err, dup.ID)
		}
	})
}
