package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// txCompletions are the two completions in the caller's transaction
// (WriteTx), by the name of their constructor: the one that keeps the row
// DONE and the one that deletes it.
func txCompletions(s *lease.Store) map[string]func(context.Context, *sql.Tx, leasework.Ref) error {
	in := func(op func(leasework.Ref) lease.Write) func(context.Context, *sql.Tx, leasework.Ref) error {
		return func(ctx context.Context, tx *sql.Tx, ref leasework.Ref) error { return s.WriteTx(ctx, tx, op(ref)) }
	}
	return map[string]func(context.Context, *sql.Tx, leasework.Ref) error{
		"Complete": in(lease.Complete), "CompleteAndDelete": in(lease.CompleteAndDelete),
	}
}

var txCompletionNames = []string{"Complete", "CompleteAndDelete"}

// finishedStatus is what a completed head looks like: DONE, or gone.
func finishedStatus(t *testing.T, s *lease.Store, id int64) string {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if errors.Is(err, lease.ErrNotFound) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(r.Status)
}

// claimHeadAlone claims what is claimable and returns it, failing the test
// unless it is the key's head alone: the row with id head.
func claimHeadAlone(t *testing.T, s *lease.Store, head int64) leasework.Claim {
	t.Helper()
	cs := claimIDs(t, s, 10)
	if len(cs) != 1 || cs[0].ID != head {
		t.Fatalf("claimed %+v; want the head alone", cs)
	}
	return cs[0]
}

// A head completed in the caller's transaction releases its key at that
// transaction's COMMIT, not before: until then its follower waits and
// nothing of the key can be claimed; a rolled-back completion releases
// nothing; the committed one promotes the follower, once.
func TestWriteTxReleasesTheKeyAtCommit(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, name := range txCompletionNames {
			t.Run(name, func(t *testing.T) {
				s := pgtest.Store(t, drv, lease.Options{})
				complete := txCompletions(s)[name]
				ctx := context.Background()
				key := "acct-" + name
				out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: key}, lease.Event{Kind: "k", Key: key})
				head, follower := out[0].ID, out[1].ID
				c := claimHeadAlone(t, s, head)

				// Rolled back: as if nothing happened.
				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := complete(ctx, tx, c.Ref()); err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				wantStatuses(t, s, []int64{head, follower}, "INPROGRESS", "WAITING")

				tx, err = s.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := complete(ctx, tx, c.Ref()); err != nil {
					t.Fatal(err)
				}
				// Accepted, not committed: the key is not released.
				wantStatuses(t, s, []int64{head, follower}, "INPROGRESS", "WAITING")
				if more := claimIDs(t, s, 10); len(more) != 0 {
					t.Fatalf("claimed %+v while the head's completion was uncommitted; want nothing", more)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				want := "DONE"
				if name == "CompleteAndDelete" {
					want = "gone"
				}
				if got := finishedStatus(t, s, head); got != want {
					t.Errorf("head is %s after the commit; want %s", got, want)
				}
				next := claimIDs(t, s, 10)
				if len(next) != 1 || next[0].ID != follower || next[0].Generation != 1 {
					t.Fatalf("claimed %+v after the commit; want the follower, generation 1", next)
				}
			})
		}
	})
}

// A stale owner's completion in its transaction is rejected and rolls its
// transaction back: the key stays with the head's new owner, whose own
// completion in its transaction promotes the follower.
func TestWriteTxOfAStaleHeadKeepsTheKey(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, name := range txCompletionNames {
			t.Run(name, func(t *testing.T) {
				s := pgtest.Store(t, drv, lease.Options{})
				complete := txCompletions(s)[name]
				ctx := context.Background()
				key := "acct-" + name
				out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: key}, lease.Event{Kind: "k", Key: key})
				head, follower := out[0].ID, out[1].ID
				stale := claimHeadAlone(t, s, head)
				if err := leasetest.ExpireLease(ctx, s, head); err != nil {
					t.Fatal(err)
				}
				owner := claimIDs(t, s, 10)
				if len(owner) != 1 || owner[0].ID != head || owner[0].Generation != 2 {
					t.Fatalf("claimed %+v; want the head again, generation 2", owner)
				}

				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				err = complete(ctx, tx, stale.Ref())
				if !errors.Is(err, leasework.ErrLeaseLost) {
					t.Fatalf("stale completion = %v; want ErrLeaseLost", err)
				}
				if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
					t.Fatalf("Commit after a rejected completion = %v; want sql.ErrTxDone", err)
				}
				wantStatuses(t, s, []int64{head, follower}, "INPROGRESS", "WAITING")

				tx, err = s.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := complete(ctx, tx, owner[0].Ref()); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if got := statusOf(t, s, follower); got != leasework.StatusReady {
					t.Errorf("follower is %s after the owner's completion; want READY", got)
				}
			})
		}
	})
}

// A transaction that completes a key's head in the caller's transaction and
// enqueues a new event of the same key, in either order: at its commit the
// head's older follower is promoted and the new event waits behind it;
// with no older follower, the new event is the key's next head.
func TestWriteTxAndEnqueueOfTheSameKey(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, name := range txCompletionNames {
			for _, completeFirst := range []bool{false, true} {
				for _, older := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/completeFirst=%v/older=%v", name, completeFirst, older), func(t *testing.T) {
						s := pgtest.Store(t, drv, lease.Options{})
						complete := txCompletions(s)[name]
						ctx := context.Background()
						key := fmt.Sprintf("x-%s-%v-%v", name, completeFirst, older)
						events := []lease.Event{{Kind: "k", Key: key}}
						if older {
							events = append(events, lease.Event{Kind: "k", Key: key})
						}
						out := pgtest.Enqueue(t, s, events...)
						c := claimHeadAlone(t, s, out[0].ID)
						tx, err := s.DB().BeginTx(ctx, nil)
						if err != nil {
							t.Fatal(err)
						}
						defer tx.Rollback()
						if completeFirst {
							if err := complete(ctx, tx, c.Ref()); err != nil {
								t.Fatal(err)
							}
						}
						more, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Key: key})
						if err != nil {
							t.Fatal(err)
						}
						if !completeFirst {
							if err := complete(ctx, tx, c.Ref()); err != nil {
								t.Fatal(err)
							}
						}
						if err := tx.Commit(); err != nil {
							t.Fatal(err)
						}
						next := claimIDs(t, s, 10)
						want := more[0].ID
						if older {
							want = out[1].ID
							if got := statusOf(t, s, more[0].ID); got != leasework.StatusWaiting {
								t.Errorf("the new event is %s; want WAITING behind the older follower", got)
							}
						}
						if len(next) != 1 || next[0].ID != want {
							t.Fatalf("claimed %+v after the commit; want row %d alone", next, want)
						}
						if _, err := s.Write(ctx, lease.Complete(next[0].Ref())); err != nil {
							t.Fatal(err)
						}
						if older {
							last := claimIDs(t, s, 10)
							if len(last) != 1 || last[0].ID != more[0].ID {
								t.Fatalf("claimed %+v; want the new event last", last)
							}
						}
					})
				}
			}
		}
	})
}
