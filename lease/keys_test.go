package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func statusOf(t *testing.T, s *lease.Store, id int64) leasework.Status {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func wantStatuses(t *testing.T, s *lease.Store, ids []int64, want ...leasework.Status) {
	t.Helper()
	for i, id := range ids {
		if got := statusOf(t, s, id); got != want[i] {
			t.Errorf("row %d (#%d) is %s, want %s", id, i, got, want[i])
		}
	}
}

func claimIDs(t *testing.T, s *lease.Store, limit int) []leasework.Claim {
	t.Helper()
	cs, err := s.Claim(context.Background(), lease.ClaimRequest{Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// A key's events enqueued in one transaction: the first is READY, the rest
// wait; each completion (DONE or deleted) promotes exactly the next one.
// Keyless events are untouched.
func TestKeyedEventsWaitBehindTheirHead(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s,
		lease.Event{Kind: "k", Key: "b"}, lease.Event{Kind: "k", Key: "a"},
		lease.Event{Kind: "k", Key: "a"}, lease.Event{Kind: "k"}, lease.Event{Kind: "k", Key: "a"},
		lease.Event{Kind: "k"})
	ids := make([]int64, len(out))
	for i, e := range out {
		ids[i] = e.ID
	}
	wantStatuses(t, s, ids, "READY", "READY", "WAITING", "READY", "WAITING", "READY")
	cs := claimIDs(t, s, 10)
	if len(cs) != 4 {
		t.Fatalf("claimed %d rows, want 4 (two keyless, one head per key)", len(cs))
	}
	var headA leasework.Ref
	for _, c := range cs {
		if c.Key == "a" {
			headA = c.Ref()
		}
	}
	if headA.ID != ids[1] {
		t.Fatalf("claimed head of a is row %d, want %d", headA.ID, ids[1])
	}
	if _, err := s.Write(ctx, lease.Complete(headA)); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, ids[1:], "DONE", "READY", "INPROGRESS", "WAITING", "INPROGRESS")
	next := claimIDs(t, s, 10)
	if len(next) != 1 || next[0].ID != ids[2] {
		t.Fatalf("after the head's completion claimed %v, want row %d only", next, ids[2])
	}
	if _, err := s.WriteMany(ctx, lease.CompleteAndDelete(next[0].Ref())); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, ids[4:5], "READY")
}

// Commit order, not id order: of two transactions enqueuing one key, the
// one that commits first is the head, though its row id is larger.
func TestKeyOrderIsCommitOrder(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	t1, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	first, err := s.Enqueue(ctx, t1, lease.Event{Kind: "k", Key: "x"})
	if err != nil {
		t.Fatal(err)
	}
	second := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "x"})
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if first[0].ID > second[0].ID {
		t.Fatalf("ids %d, %d: the test needs the later commit to have the smaller id", first[0].ID, second[0].ID)
	}
	wantStatuses(t, s, []int64{second[0].ID, first[0].ID}, "READY", "WAITING")
}

// A handler's transaction that completes the head and enqueues a new event
// of the same key puts the new event behind the key's older followers.
func TestCompleteAndEnqueueSameKeyInOneTransaction(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"})
	head := claimIDs(t, s, 1)[0]
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	more, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Key: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET status = 'DONE', lease_until = NULL WHERE id = $1 AND generation = $2`, head.ID, head.Generation); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, []int64{out[0].ID, out[1].ID, more[0].ID}, "DONE", "READY", "WAITING")
}

// A REPEATABLE READ transaction could not see the commits it waits for, so a
// keyed enqueue in one is refused at commit with a clear error; keyless
// events are accepted.
func TestKeyedEnqueueRefusesRepeatableRead(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	for _, key := range []string{"", "x"} {
		tx, err := s.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Key: key}); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit()
		if key == "" && err != nil {
			t.Fatalf("keyless commit: %v", err)
		}
		if key != "" && (err == nil || !strings.Contains(err.Error(), "need READ COMMITTED")) {
			t.Fatalf("keyed commit in REPEATABLE READ = %v, want the READ COMMITTED error", err)
		}
	}
}

// Discard is guarded by FAILED and the generation seen, releases the key,
// and HeldKeys shows the held key before.
func TestDiscardReleasesAHeldKey(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"})
	head := claimIDs(t, s, 10)[0]
	if _, err := s.Write(ctx, lease.Fail(head.Ref(), "boom")); err != nil {
		t.Fatal(err)
	}
	if cs := claimIDs(t, s, 10); len(cs) != 0 {
		t.Fatalf("claimed %d rows behind a FAILED head", len(cs))
	}
	held, err := s.HeldKeys(ctx, lease.HeldKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Key != "x" || held[0].HeadID != out[0].ID || held[0].LastError != "boom" || held[0].Waiting != 2 || held[0].Generation != 1 {
		t.Fatalf("held keys = %+v", held)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.HeldKeys != 1 || st.Rows[leasework.StatusWaiting] != 2 || st.Rows[leasework.StatusFailed] != 1 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	if _, err := s.Discard(ctx, leasework.Ref{ID: head.ID, Generation: 0}); !errors.Is(err, lease.ErrNotFailed) {
		t.Fatalf("discard at a stale generation = %v, want ErrNotFailed", err)
	}
	if _, err := s.Discard(ctx, leasework.Ref{ID: out[1].ID, Generation: 0}); !errors.Is(err, lease.ErrNotFailed) {
		t.Fatalf("discard of a WAITING row = %v, want ErrNotFailed", err)
	}
	if _, err := s.Discard(ctx, leasework.Ref{ID: 1 << 40, Generation: 0}); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("discard of no row = %v, want ErrNotFound", err)
	}
	gen, err := s.Discard(ctx, head.Ref())
	if err != nil || gen != 2 {
		t.Fatalf("discard = %d, %v; want generation 2", gen, err)
	}
	wantStatuses(t, s, []int64{out[0].ID, out[1].ID, out[2].ID}, "DISCARDED", "READY", "WAITING")
	if held, err := s.HeldKeys(ctx, lease.HeldKeysRequest{}); err != nil || len(held) != 0 {
		t.Fatalf("held keys after discard = %+v, %v", held, err)
	}
}

// holdKeyLock takes key's commit-time lock in a transaction of its own, as
// an enqueue of the key does during its commit, and returns the transaction.
func holdKeyLock(t *testing.T, s *lease.Store, key string) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('leasework-key:' || $1 || ':' || $2, 0))`,
		s.Schema()+"."+s.Table(), key); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A batch completing heads of two keys, meeting a key whose lock an
// enqueue holds after taking another of the batch's keys, gives way with
// 55P03 and writes nothing, instead of waiting in a possible circle; alone,
// a completion waits for the lock and succeeds once it is released.
func TestCompletionBatchOverSeveralKeysGivesWay(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "b"}, lease.Event{Kind: "k", Key: "a"})
	cs := claimIDs(t, s, 10)
	if len(cs) != 2 {
		t.Fatalf("claimed %d rows, want the two heads", len(cs))
	}
	refs := []leasework.Ref{cs[0].Ref(), cs[1].Ref()}
	// The batch meets its rows in id order: lock the key of the later one.
	// (Enqueue inserted the call's events in key order: a, then b.)
	if cs[0].Key != "a" || cs[1].Key != "b" || cs[0].ID > cs[1].ID {
		t.Fatalf("claims %+v: want a's head before b's, in id order", cs)
	}
	holder := holdKeyLock(t, s, "b")
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.WriteMany(bounded, writesFor(refs, lease.Complete)...)
	if err != nil || len(res) != 2 {
		t.Fatalf("batch over two keys while one is locked = %+v, %v; want a result per write, no call error", res, err)
	}
	for _, r := range res {
		if got := drv.SQLState(r.Err); r.Verdict != lease.VerdictNoAnswer || got != "55P03" || !strings.Contains(r.Err.Error(), "gives way") {
			t.Fatalf("batch over two keys while one is locked: %+v (SQLSTATE %q); want no answer, 55P03, giving way", r, got)
		}
	}
	for _, id := range []int64{out[0].ID, out[1].ID} {
		if st := statusOf(t, s, id); st != leasework.StatusInProgress {
			t.Fatalf("row %d is %s after the batch gave way; want INPROGRESS (nothing written)", id, st)
		}
	}

	// One key per transaction: the completion waits for the lock.
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(ctx, lease.Complete(cs[1].Ref()))
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the completion returned %v while its key's lock was held; want it to wait", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the completion never waited for the key's lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("completion after the lock was released: %v", err)
	}
	if _, err := s.Write(ctx, lease.Complete(cs[0].Ref())); err != nil {
		t.Fatal(err)
	}
}

// Migration 4 on a table with a keyed backlog enqueued before it (made here
// by undoing what it did: every keyed row READY, no key_seq, the migration
// unrecorded): rerun, it puts each key's rows in order by id, the first
// live one staying, and the triggers it recreates keep the order.
func TestOrderMigrationOrdersAnOlderBacklog(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "x"}, lease.Event{Kind: "k", Key: "x"},
		lease.Event{Kind: "k", Key: "y"}, lease.Event{Kind: "k"})
	head := claimIDs(t, s, 10)
	if len(head) != 3 {
		t.Fatalf("claimed %d rows, want the heads of x and y and the keyless row", len(head))
	}
	for _, q := range []string{
		`UPDATE ` + s.QualifiedTable() + ` SET status = 'READY', key_seq = NULL WHERE status = 'WAITING'`,
		`UPDATE ` + s.QualifiedTable() + ` SET key_seq = NULL`,
		`DELETE FROM ` + lease.QuoteIdent(s.Schema()) + `.` + lease.QuoteIdent(s.Table()+"_migrations") + ` WHERE version = 4`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	wantStatuses(t, s, []int64{out[0].ID, out[1].ID}, "INPROGRESS", "READY")
	applied, err := s.Migrate(ctx)
	if err != nil || len(applied) != 1 || applied[0] != 4 {
		t.Fatalf("migrate = %v, %v; want migration 4 applied again", applied, err)
	}
	wantStatuses(t, s, []int64{out[0].ID, out[1].ID, out[2].ID, out[3].ID}, "INPROGRESS", "WAITING", "INPROGRESS", "INPROGRESS")
	for _, c := range head {
		if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
			t.Fatal(err)
		}
	}
	next := claimIDs(t, s, 10)
	if len(next) != 1 || next[0].ID != out[1].ID {
		t.Fatalf("after the heads completed claimed %+v; want x's second row only", next)
	}
	if applied, err := s.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("third migrate = %v, %v; want nothing applied", applied, err)
	}
}
