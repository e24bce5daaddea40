package lease_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The tests of this file hold a key's turn against every way its head can
// end while an attempt runs it (invariant 16): the next event of the key
// is claimable only once that attempt's lease has ended or its owner has
// stopped. Each asserts with claims and rows, never with time.

// keyedPair enqueues a head and a follower of one key, claims the head and
// returns its claim and the follower's row id.
func keyedPair(t *testing.T, s *lease.Store, key string) (leasework.Claim, int64) {
	t.Helper()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: key, EventID: key + "-head"},
		lease.Event{Kind: "k", Key: key, EventID: key + "-next"})
	return claimHeadAlone(t, s, out[0].ID), out[1].ID
}

// claimNothing fails the test unless a claim takes nothing, after what.
func claimNothing(t *testing.T, s *lease.Store, what string) {
	t.Helper()
	if got := claimIDs(t, s, 10); len(got) != 0 {
		var ids []string
		for _, c := range got {
			ids = append(ids, c.EventID)
		}
		t.Fatalf("%s: claimed %v; want nothing (the head's attempt may still run)", what, ids)
	}
}

// Cancelling a running head marks it and keeps its key: the follower is
// not claimable while the attempt's lease runs. The owner learns of the
// cancel from its renewal (rejected as cancelled, the row still held);
// its next outcome write is its acknowledged stop: the head ends
// DISCARDED and the follower is claimable.
func TestCancelOfARunningHeadHoldsTheKeyUntilItsOwnerStops(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		head, next := keyedPair(t, s, "acct")
		if res, err := s.Cancel(ctx, head.ID, "withdrawn"); err != nil || !res.Stopping || res.Generation != head.Generation {
			t.Fatalf("cancel of the running head: %+v, %v; want Stopping at generation %d", res, err, head.Generation)
		}
		claimNothing(t, s, "after cancelling the running head")
		wantStatuses(t, s, []int64{head.ID, next}, "INPROGRESS", "WAITING")

		res, err := s.WriteMany(ctx, lease.Renew(head.Ref(), time.Minute))
		if err != nil || len(res) != 1 || res[0].Verdict != lease.VerdictCancelled || !errors.Is(res[0].Err, leasework.ErrCancelled) {
			t.Fatalf("renewal of the cancelled attempt: %+v, %v; want rejected as cancelled", res, err)
		}
		claimNothing(t, s, "after the owner's renewal was told of the cancel")
		wantStatuses(t, s, []int64{head.ID, next}, "INPROGRESS", "WAITING")

		// A completion in the caller's transaction is rejected as cancelled
		// too, but ends nothing: the caller may still run the attempt.
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteTx(ctx, tx, lease.Complete(head.Ref())); !errors.Is(err, leasework.ErrCancelled) {
			t.Fatalf("WriteTx of a completion by the cancelled attempt: %v; want ErrCancelled", err)
		}
		claimNothing(t, s, "after the owner's WriteTx was rejected")
		wantStatuses(t, s, []int64{head.ID, next}, "INPROGRESS", "WAITING")

		// The handler has stopped; whatever outcome its owner writes is
		// rejected as cancelled, and ends the attempt.
		if _, err := s.Write(ctx, lease.Complete(head.Ref())); !errors.Is(err, leasework.ErrCancelled) {
			t.Fatalf("completion by the cancelled attempt: %v; want ErrCancelled", err)
		}
		r, err := s.Get(ctx, head.ID)
		if err != nil || r.Status != leasework.StatusDiscarded || r.Generation <= head.Generation ||
			r.LastError != "cancelled: withdrawn" || r.CancelledAt == nil {
			t.Fatalf("head after its owner stopped: %+v, %v; want DISCARDED at a newer generation, cancelled: withdrawn", r, err)
		}
		if got := claimIDs(t, s, 10); len(got) != 1 || got[0].ID != next {
			t.Fatalf("after the owner stopped, claimed %+v; want the follower alone", got)
		}
	})
}

// A cancelled head whose owner never answers (dead, paused) holds its key
// until its lease ends; then the claim statement ends it DISCARDED
// instead of claiming it again, and the follower is claimable.
func TestCancelOfAHeadWhoseOwnerIsGoneWaitsForItsLease(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		head, next := keyedPair(t, s, "acct")
		if _, err := s.Cancel(ctx, head.ID, ""); err != nil {
			t.Fatal(err)
		}
		claimNothing(t, s, "after cancelling the running head")
		if err := leasetest.ExpireLease(ctx, s, head.ID); err != nil {
			t.Fatal(err)
		}
		// The claim that finds the expired lease settles the head; the
		// follower it promotes at that commit is for the next claim.
		for _, c := range claimIDs(t, s, 10) {
			if c.ID == head.ID {
				t.Fatalf("the cancelled head was claimed again: %+v", c)
			}
		}
		r, err := s.Get(ctx, head.ID)
		if err != nil || r.Status != leasework.StatusDiscarded || r.Generation <= head.Generation || r.LeaseUntil != nil {
			t.Fatalf("head after its lease ended: %+v, %v; want DISCARDED at a newer generation, no lease", r, err)
		}
		if st := statusOf(t, s, next); st != leasework.StatusReady && st != leasework.StatusInProgress {
			t.Fatalf("follower after the head's lease ended: %s; want READY or claimed", st)
		}
		// A late write of the head's owner is told it was cancelled.
		if _, err := s.Write(ctx, lease.Complete(head.Ref())); !errors.Is(err, leasework.ErrCancelled) {
			t.Fatalf("late completion by the cancelled attempt: %v; want ErrCancelled", err)
		}
	})
}

// Discard ends FAILED heads only, and a FAILED head holds no lease: a head
// whose owner is paused is not discardable while its lease runs, and once
// the lease has ended on the last attempt (FAILED, by the claim), the
// discard passes the key on.
func TestDiscardNeverEndsAHeadWhoseLeaseRuns(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "acct", MaxAttempts: 1},
			lease.Event{Kind: "k", Key: "acct"})
		head, next := claimHeadAlone(t, s, out[0].ID), out[1].ID
		if _, err := s.Discard(ctx, head.Ref()); !errors.Is(err, lease.ErrNotFailed) {
			t.Fatalf("discard of a running head: %v; want ErrNotFailed", err)
		}
		claimNothing(t, s, "after a refused discard of the running head")
		if err := leasetest.ExpireLease(ctx, s, head.ID); err != nil { // its owner paused
			t.Fatal(err)
		}
		claimNothing(t, s, "after the head's last lease ended (it is FAILED now)")
		r, err := s.Get(ctx, head.ID)
		if err != nil || r.Status != leasework.StatusFailed {
			t.Fatalf("head after its last lease ended: %+v, %v; want FAILED", r, err)
		}
		if _, err := s.Discard(ctx, leasework.Ref{ID: head.ID, Generation: r.Generation}); err != nil {
			t.Fatal(err)
		}
		if got := claimIDs(t, s, 10); len(got) != 1 || got[0].ID != next {
			t.Fatalf("after the discard, claimed %+v; want the follower alone", got)
		}
	})
}

// An operator's DELETE of a keyed row under a live lease is refused, with
// an error that names the fix, and the key stays held; once the lease has
// ended the same DELETE goes through and passes the key on. The owner's
// own deletion at completion is not refused.
func TestDeleteOfARunningHeadIsRefused(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		head, next := keyedPair(t, s, "acct")
		del := `DELETE FROM ` + s.QualifiedTable() + ` WHERE id = $1`
		_, err := s.DB().ExecContext(ctx, del, head.ID)
		if err == nil || !strings.Contains(err.Error(), "cancel") {
			t.Fatalf("DELETE of the running head: %v; want refused, saying to cancel it", err)
		}
		claimNothing(t, s, "after a DELETE of the running head")
		wantStatuses(t, s, []int64{head.ID, next}, "INPROGRESS", "WAITING")

		if err := leasetest.ExpireLease(ctx, s, head.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().ExecContext(ctx, del, head.ID); err != nil {
			t.Fatalf("DELETE of the head once its lease ended: %v", err)
		}
		got := claimIDs(t, s, 10)
		if len(got) != 1 || got[0].ID != next {
			t.Fatalf("after deleting the head, claimed %+v; want the follower alone", got)
		}
		res, err := s.WriteMany(ctx, lease.CompleteAndDelete(got[0].Ref()))
		if err != nil || res[0].Verdict != lease.VerdictAccepted || res[0].Err != nil {
			t.Fatalf("the owner's completion that deletes its row: %+v, %v; want accepted", res, err)
		}
		if _, err := s.Get(ctx, next); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("row after its owner's completion with deletion: %v; want deleted", err)
		}
	})
}

// A keyed event enqueued in a transaction is not claimable in that
// transaction: ordering decides at its COMMIT whether it is its key's head,
// so a ClaimTx there takes neither the event behind a running head and its
// waiting follower, nor the first event of a fresh key; a keyless event of
// the transaction is claimable as before. After the commit each key has
// one live row at most.
func TestClaimTxOfTheEnqueuingTransactionWaitsForOrdering(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		head, waiting := keyedPair(t, s, "acct")
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		out, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", Key: "acct", EventID: "acct-third"},
			lease.Event{Kind: "k", Key: "fresh", EventID: "fresh"}, lease.Event{Kind: "k", EventID: "plain"})
		if err != nil {
			t.Fatal(err)
		}
		claims, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range claims {
			got = append(got, c.EventID)
		}
		if !slices.Equal(got, []string{"plain"}) {
			t.Fatalf("ClaimTx in the enqueuing transaction took %v; want [plain]: keyed events wait for ordering at commit", got)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wantStatuses(t, s, []int64{head.ID, waiting, out[0].ID, out[1].ID}, "INPROGRESS", "WAITING", "WAITING", "READY")
		var live int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+s.QualifiedTable()+
			` WHERE key = 'acct' AND status = 'INPROGRESS'`).Scan(&live); err != nil || live != 1 {
			t.Fatalf("INPROGRESS rows of key acct after the commit: %d, %v; want 1", live, err)
		}
		if got := claimIDs(t, s, 10); len(got) != 1 || got[0].EventID != "fresh" {
			t.Fatalf("claim after the commit: %+v; want fresh alone", got)
		}
	})
}

// The claim ends the expired leases of cancelled attempts reading the
// index of such rows alone: with 20,000 expired leases of another queue
// that nobody works off beside them, it reads the three cancelled ones and
// nothing else, with custom and with generic plans, and ends them.
func TestClaimPlanEndsCancelledAttemptsThroughTheirIndex(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", Queue: "other"}, lease.Event{Kind: "k", Queue: "other"},
		lease.Event{Kind: "k", Queue: "other"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 3, Lease: time.Minute, Queue: "other"})
	if err != nil || len(claims) != 3 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	for _, c := range claims {
		if res, err := s.Cancel(ctx, c.ID, ""); err != nil || !res.Stopping {
			t.Fatalf("cancel of a running event: %+v, %v", res, err)
		}
		if err := leasetest.ExpireLease(ctx, s, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := leasetest.InsertReady(ctx, s, "other", 20_000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+`
		SET status = 'INPROGRESS', generation = 1, attempt = 1, lease_until = statement_timestamp() - interval '1 minute'
		WHERE kind = 'backlog'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, "VACUUM (ANALYZE) "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, lease.ClaimStatement(s), "100, ARRAY['k'], 60000000, '', 'default', '{}', 0")
		if !strings.Contains(plan, "Index Scan using "+s.Table()+"_stopping_idx") || strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: the claim does not read the cancelled attempts' index alone:\n%s", mode, plan)
		}
		if !regexp.MustCompile(`Update on events o_\d+ \(actual [^)]* rows=3 loops=1\)`).MatchString(plan) {
			t.Errorf("%s: the claim did not end the three cancelled attempts:\n%s", mode, plan)
		}
		for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				t.Errorf("%s: claim plan removes %d rows by filter:\n%s", mode, n, plan)
			}
		}
	}
	if got := claimIDs(t, s, 10); len(got) != 0 {
		t.Fatalf("claim of the default queue = %+v; want nothing", got)
	}
	for _, c := range claims {
		if st := statusOf(t, s, c.ID); st != leasework.StatusDiscarded {
			t.Errorf("cancelled attempt's row after its lease ended and a claim ran: %s; want DISCARDED", st)
		}
	}
}

// A claim that ends cancelled heads of several keys whose leases ran out
// ends one keyed row at most: a transaction finishing rows of several keys
// gives way to an enqueue holding one of their keys (migration 4), which
// would fail the claim. With key b's commit-time lock held, the claim
// succeeds and ends a's head; once the lock is let go, the next claim ends
// b's; every follower is claimed in turn.
func TestClaimEndingCancelledHeadsOfSeveralKeysNeverGivesWay(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "a", EventID: "a1"}, lease.Event{Kind: "k", Key: "a", EventID: "a2"},
		lease.Event{Kind: "k", Key: "b", EventID: "b1"}, lease.Event{Kind: "k", Key: "b", EventID: "b2"})
	a1, a2, b1, b2 := out[0].ID, out[1].ID, out[2].ID, out[3].ID
	if got := claimIDs(t, s, 10); len(got) != 2 {
		t.Fatalf("claimed %+v; want the two heads", got)
	}
	for i, id := range []int64{a1, b1} {
		if res, err := s.Cancel(ctx, id, ""); err != nil || !res.Stopping {
			t.Fatalf("cancel of running head %d: %+v, %v", id, res, err)
		}
		// a's lease ran out first: the claim takes it first.
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+
			` SET lease_until = statement_timestamp() - $2 * interval '1 minute' WHERE id = $1`, id, 2-i); err != nil {
			t.Fatal(err)
		}
	}
	holder := holdKeyLock(t, s, "b")
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := s.Claim(bounded, lease.ClaimRequest{Limit: 10, Lease: time.Minute}); err != nil || len(got) != 0 {
		t.Fatalf("claim while b's lock is held: %+v, %v; want nothing, no error", got, err)
	}
	wantStatuses(t, s, []int64{a1, a2, b1, b2}, "DISCARDED", "READY", "INPROGRESS", "WAITING")
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, 10); len(got) != 1 || got[0].ID != a2 {
		t.Fatalf("claim after b's lock was let go: %+v; want a2", got)
	}
	wantStatuses(t, s, []int64{b1, b2}, "DISCARDED", "READY")
	if got := claimIDs(t, s, 10); len(got) != 1 || got[0].ID != b2 {
		t.Fatalf("next claim: %+v; want b2", got)
	}
}
