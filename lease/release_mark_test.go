package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestStoreCompletionsLeaveTheReleaseTriggersNothing: the store's own
// completions pass their keys on in their statement and mark the
// transaction before they write a row, so the release triggers, whose
// condition reads that mark (migration 16), queue nothing for their rows:
// with the triggers' function replaced by one that fails when called,
// WriteMany (rows kept DONE) and WriteManyTakingTurns (rows deleted)
// still commit, and the keys' next events go on. A completion in the
// caller's transaction, which leaves its keys to the triggers, does reach
// the function: it fails there.
func TestStoreCompletionsLeaveTheReleaseTriggersNothing(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for range 3 {
		pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "a"}, lease.Event{Kind: "k", Key: "b"})
	}
	fn := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_release_key")
	if _, err := s.DB().ExecContext(ctx, `CREATE OR REPLACE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the release trigger fired';
END $$`); err != nil {
		t.Fatal(err)
	}
	req := lease.ClaimRequest{Limit: 10, Lease: time.Hour, Worker: "w"}
	heads, err := s.Claim(ctx, req)
	if err != nil || len(heads) != 2 {
		t.Fatalf("claim: %d claims, %v; want the heads of a and b", len(heads), err)
	}
	res, err := s.WriteMany(ctx, lease.Complete(heads[0].Ref()), lease.Complete(heads[1].Ref()))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Verdict != lease.VerdictAccepted {
			t.Fatalf("WriteMany's completion of row %d: %v, %v", r.Ref.ID, r.Verdict, r.Err)
		}
	}
	next, err := s.Claim(ctx, req)
	if err != nil || len(next) != 2 {
		t.Fatalf("claim after WriteMany: %d claims, %v; want the second events of a and b", len(next), err)
	}
	took := completeTakingTurns(t, s, req, lease.CompleteAndDelete, next...)
	if len(took) != 2 {
		t.Fatalf("WriteManyTakingTurns took %d turns; want the third events of a and b", len(took))
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteTx(ctx, tx, lease.Complete(took[0].Ref()))
	if err == nil {
		err = tx.Commit()
	}
	if err == nil || !strings.Contains(err.Error(), "the release trigger fired") {
		t.Fatalf("a completion in the caller's transaction: %v; want the release trigger's function called at COMMIT", err)
	}
	if st := statusOf(t, s, took[0].ID); st != leasework.StatusInProgress {
		t.Fatalf("row %d is %s after the failed COMMIT; want INPROGRESS", took[0].ID, st)
	}
}
