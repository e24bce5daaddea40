package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// WriteTx refuses a nil transaction, and a completion whose statement
// fails (here: its context is already cancelled) rolls the caller's
// transaction back too, so its writes cannot be committed by mistake.
func TestWriteTxRollsBackOnAnyError(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	if err := s.WriteTx(ctx, nil, lease.Complete(claims[0].Ref())); err == nil {
		t.Error("WriteTx with a nil tx succeeded")
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.WriteTx(cancelled, tx, lease.Complete(claims[0].Ref())); err == nil || errors.Is(err, leasework.ErrLeaseLost) {
		t.Errorf("WriteTx with a cancelled context = %v; want an error other than ErrLeaseLost", err)
	}
	if err := tx.Commit(); err == nil {
		t.Error("Commit after a failed WriteTx succeeded")
	}
	if r, err := s.Get(ctx, claims[0].ID); err != nil || r.Status != leasework.StatusInProgress {
		t.Errorf("row = %+v, %v; want still INPROGRESS", r, err)
	}
}

// BenchmarkRenewBesideOpenCompletion renews a batch of 50 claims, alone
// ("idle") and while one of them is locked by a transaction that completed
// it with WriteTx and has not committed ("completing"): the renewal
// skips the locked row instead of waiting for the commit, so both cost
// about the same. Each completing transaction lives for one renewal (begun,
// completed and rolled back with the timer stopped), as a handler's
// transaction lives for a few renewals of its neighbours at most: a
// transaction held open across thousands of renewals would measure
// PostgreSQL's row versions piling up behind it instead. Compare ns/op of
// the two in one run.
func BenchmarkRenewBesideOpenCompletion(b *testing.B) {
	for _, mode := range []string{"idle", "completing"} {
		b.Run(mode, func(b *testing.B) {
			const batch = 50
			s := pgtest.Store(b, drv, lease.Options{})
			ctx := context.Background()
			pgtest.EnqueueN(b, s, batch, "k")
			claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: batch, Lease: time.Hour})
			if err != nil || len(claims) != batch {
				b.Fatalf("claim = %d, %v", len(claims), err)
			}
			refs := make([]leasework.Ref, batch)
			renewals := make([]lease.Write, batch)
			for i, c := range claims {
				refs[i] = c.Ref()
				renewals[i] = lease.Renew(c.Ref(), time.Hour)
			}
			want := batch
			if mode == "completing" {
				want--
			}
			for b.Loop() {
				var tx *sql.Tx
				if mode == "completing" {
					b.StopTimer()
					if tx, err = s.DB().BeginTx(ctx, nil); err != nil {
						b.Fatal(err)
					}
					if err := s.WriteTx(ctx, tx, lease.Complete(refs[batch/2])); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				res, err := s.WriteMany(ctx, renewals...)
				if err != nil {
					b.Fatal(err)
				}
				renewed := 0
				for _, r := range res {
					if r.Err == nil {
						renewed++
					}
				}
				if renewed != want {
					b.Fatalf("renewed %d of %d; want %d", renewed, batch, want)
				}
				if tx != nil {
					b.StopTimer()
					tx.Rollback()
					b.StartTimer()
				}
			}
		})
	}
}
