package pq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The store copies large batches on any pool of lib/pq's driver, not only
// one the package opened (whose statements carry all rows in one Exec):
// on sql.Open("postgres", …) each row is an Exec of its own. Both give the
// rows, and a duplicate is ErrDuplicateEvent.
func TestCopyOnEveryPoolOfLibPQ(t *testing.T) {
	ctx := context.Background()
	pools := map[string]func() (*sql.DB, error){
		"Driver.Open": func() (*sql.DB, error) { return pqdriver.New().Open(pgtest.DSN(t)) },
		"sql.Open":    func() (*sql.DB, error) { return sql.Open("postgres", pgtest.DSN(t)) },
	}
	for name, open := range pools {
		t.Run(name, func(t *testing.T) {
			db, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			fix := pgtest.Store(t, pqdriver.New(), lease.Options{})
			s, err := lease.New(db, pqdriver.New(), lease.Options{Schema: fix.Schema(), EnqueueCopyMin: 1})
			if err != nil {
				t.Fatal(err)
			}
			inserts := pgtest.WatchInserts(t, fix)
			events := make([]lease.Event, 500)
			for i := range events {
				events[i] = lease.Event{Kind: "k", EventID: fmt.Sprint("e-", i), Payload: []byte(fmt.Sprint(i)), Key: fmt.Sprint("key-", i%7)}
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Enqueue(ctx, tx, events...)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for i, o := range out {
				r, err := fix.Get(ctx, o.ID)
				if err != nil || r.EventID != events[i].EventID || string(r.Payload) != string(events[i].Payload) || r.Key != events[i].Key {
					t.Fatalf("event %d: row %+v, %v; want the event as given", i, r, err)
				}
			}
			if copies, statements := inserts(); copies != 1 || statements != 0 {
				t.Errorf("rows went in by %d COPY and %d INSERT statements; want one COPY", copies, statements)
			}
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", EventID: "new"}, lease.Event{Kind: "k", EventID: "e-7"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
				t.Errorf("a copied duplicate: %v; want ErrDuplicateEvent", err)
			}
		})
	}
}

// A COPY whose context ends while the server holds it (its event id
// waits for another transaction's uncommitted row of the same id) returns
// soon after, on a pool the package opened: the socket gets its deadline
// though lib/pq sends no cancel request for a COPY, and the connection
// is discarded.
func TestCopyEndsWithItsContext(t *testing.T) {
	s := pgtest.Store(t, pqdriver.New(), lease.Options{EnqueueCopyMin: 1})
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	holder, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() // first: it frees a COPY still held
	if _, err := s.Enqueue(ctx, holder, lease.Event{Kind: "k", EventID: "held"}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Enqueue(cctx, tx, lease.Event{Kind: "k", EventID: "other"}, lease.Event{Kind: "k", EventID: "held"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Errorf("a COPY held past its context: %v; want an error of the ended context", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a COPY held by another transaction's row did not return within a minute of its context's end")
	}
}
