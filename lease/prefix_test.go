package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An error wrapping another of this package names the package once: "lease:
// get row 5: no such event", not "lease: get row 5: lease: no such event".
func TestErrorsNameTheirPackageOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		type check struct {
			name  string
			err   error
			start string
			is    error
		}
		var checks []check
		add := func(name string, err error, start string, is error) {
			checks = append(checks, check{name, err, start, is})
		}

		db := pgtest.Open(t, drv)
		for _, opts := range []lease.Options{{Schema: "Bad"}, {Table: "a.b"}, {MaxAttempts: -1}} {
			_, err := lease.New(db, drv, opts)
			add("New with bad options", err, "lease: Options.", nil)
		}

		_, err := s.Get(ctx, 1<<40)
		add("Get of a missing row", err, "lease: get row 1099511627776: no such event", lease.ErrNotFound)
		_, err = s.GetByEventID(ctx, "missing")
		add("GetByEventID of a missing event", err, `lease: get event "missing": no such event`, lease.ErrNotFound)
		_, err = s.Discard(ctx, leasework.Ref{ID: 1 << 40, Generation: 1})
		add("Discard of a missing row", err, "lease: discard row 1099511627776: get row 1099511627776: no such event", lease.ErrNotFound)

		ready := pgtest.Enqueue(t, s, lease.Event{Kind: "ready"})[0]
		_, err = s.Discard(ctx, leasework.Ref{ID: ready.ID, Generation: 0})
		add("Discard of a READY row", err, "lease: discard row", lease.ErrNotFailed)

		// A renewal skips a row an open transaction has completed, and
		// reports it busy.
		pgtest.Enqueue(t, s, lease.Event{Kind: "busy"})
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"busy"}})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v, %v", claims, err)
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := s.WriteTx(ctx, tx, lease.Complete(claims[0].Ref())); err != nil {
			t.Fatal(err)
		}
		res, err := s.WriteMany(ctx, lease.Renew(claims[0].Ref(), time.Minute))
		if err != nil || len(res) != 1 || res[0].Verdict != lease.VerdictBusy {
			t.Fatalf("renew of a row an open transaction completed: %+v, %v; want it busy", res, err)
		}
		add("a renewal of a locked row", res[0].Err, "lease: renew row", lease.ErrRowBusy)
		tx.Rollback()

		// A store whose table was never migrated.
		unmigrated, err := lease.New(db, drv, lease.Options{Schema: pgtest.SchemaName()})
		if err != nil {
			t.Fatal(err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = unmigrated.WriteTx(ctx, tx, lease.Complete(leasework.Ref{ID: 1, Generation: 1}))
		add("WriteTx on a table not migrated", err,
			"lease: complete in transaction row 1 generation 1: the transaction was rolled back: table", nil)

		for _, c := range checks {
			if c.err == nil {
				t.Errorf("%s: no error", c.name)
				continue
			}
			msg := c.err.Error()
			if !strings.HasPrefix(msg, c.start) {
				t.Errorf("%s: error %q; want it to start with %q", c.name, msg, c.start)
			}
			if n := strings.Count(msg, "lease: "); n != 1 {
				t.Errorf("%s: error %q says %q %d times; want once", c.name, msg, "lease: ", n)
			}
			if c.is != nil && !errors.Is(c.err, c.is) {
				t.Errorf("%s: error %q does not match %v", c.name, msg, c.is)
			}
		}
	})
}
