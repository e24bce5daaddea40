package framework_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// What the next COMMIT through a lostReplyDriver's pool does.
const (
	commitNormally = iota
	commitThenLoseReply
	rollBackThenLoseReply
)

// errLostReply is what a COMMIT whose reply was lost returns.
var errLostReply = fmt.Errorf("commit: connection lost: %w", io.ErrUnexpectedEOF)

// lostReplyDriver is pgx's driver with one fault: it can make the next
// COMMIT on its pools end in a lost connection, after the server committed
// the transaction or after it rolled it back, as a connection cut while
// COMMIT is in flight does. The statements themselves run on a real
// server, unchanged.
type lostReplyDriver struct {
	leasework.Driver // pgx's, without its optional Notifier: the worker polls
	next             atomic.Int32
}

func (d *lostReplyDriver) Open(dsn string) (*sql.DB, error) {
	c, err := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(&lostReplyConnector{Connector: c, d: d}), nil
}

type lostReplyConnector struct {
	driver.Connector
	d *lostReplyDriver
}

func (c *lostReplyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &lostReplyConn{Conn: conn.(*stdlib.Conn), d: c.d}, nil
}

// lostReplyConn is a pgx connection (every method and optional interface
// of *stdlib.Conn) whose transactions can lose their COMMIT's reply.
type lostReplyConn struct {
	*stdlib.Conn
	d *lostReplyDriver
}

func (c *lostReplyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &lostReplyTx{Tx: tx, d: c.d}, nil
}

type lostReplyTx struct {
	driver.Tx
	d *lostReplyDriver
}

func (t *lostReplyTx) Commit() error {
	switch t.d.next.Swap(commitNormally) {
	case commitThenLoseReply:
		if err := t.Tx.Commit(); err != nil {
			return err
		}
		return errLostReply
	case rollBackThenLoseReply:
		if err := t.Tx.Rollback(); err != nil {
			return err
		}
		return errLostReply
	}
	return t.Tx.Commit()
}

// A Transactional handler whose COMMIT fails with its outcome unknown is
// settled by the guarded write that follows: when the transaction did
// commit, the row shows the claim's completion (DONE at its generation, or
// deleted before the lease could expire) and the attempt counts as
// completed, with its one effect; when it did not, the retry is recorded
// and the next attempt applies the effect, once. Kept and deleted rows
// alike.
func TestTransactionalCommitWithLostReply(t *testing.T) {
	for _, retention := range []time.Duration{-1, 0} {
		t.Run(fmt.Sprintf("retention=%v", retention), func(t *testing.T) {
			drv := &lostReplyDriver{Driver: pgtest.Drivers[0].New()}
			db, err := drv.Open(pgtest.DSN(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			s := newStore(t, pgtest.Drivers[0].New())
			table := effectsTable(t, s)
			ids := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "committed"}, lease.Event{Kind: "k", EventID: "rolled-back"})
			w, err := framework.New(db, drv, framework.Config{
				Schema: s.Schema(), Concurrency: 1, PollInterval: 20 * time.Millisecond,
				Retention: retention, DeleteAtCompletion: retention == 0, Logger: testLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			registerTx(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond}, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
				if c.Attempt == 1 && c.EventID == "committed" {
					drv.next.Store(commitThenLoseReply)
				}
				if c.Attempt == 1 && c.EventID == "rolled-back" {
					drv.next.Store(rollBackThenLoseReply)
				}
				return insertEffect(ctx, tx, table, c)
			})
			stop := start(t, w)
			waitFor(t, "both events to complete", func() bool { return w.Counters().Completed == 2 })
			stop()

			want := map[string]int64{"committed": 1, "rolled-back": 2} // the attempt whose effect stands
			var gens = map[string]int64{}
			rows, err := s.DB().Query("SELECT event_id, generation FROM " + table)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var id string
				var gen int64
				if err := rows.Scan(&id, &gen); err != nil {
					t.Fatal(err)
				}
				gens[id] = gen
				n++
			}
			rows.Close()
			if n != 2 || gens["committed"] != want["committed"] || gens["rolled-back"] != want["rolled-back"] {
				t.Errorf("%d effects, generations %v; want one per event, from generations %v", n, gens, want)
			}
			for _, e := range ids {
				r, err := s.Get(context.Background(), e.ID)
				switch {
				case retention == 0 && !errors.Is(err, lease.ErrNotFound):
					t.Errorf("row %s: %+v, %v; want deleted at completion", e.EventID, r, err)
				case retention != 0 && (err != nil || r.Status != leasework.StatusDone || r.Generation != want[e.EventID]):
					t.Errorf("row %s: %+v, %v; want DONE at generation %d", e.EventID, r, err, want[e.EventID])
				}
			}
			if c := w.Counters(); c.Completed != 2 || c.Retried != 1 || c.StaleRejections != 0 || c.LeasesLost != 0 || c.Claimed != 3 {
				t.Errorf("counters %+v; want 3 claims, 1 retry (the rolled-back commit), 2 completions, nothing stale", c)
			}
		})
	}
}
