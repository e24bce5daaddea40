package leaseworktest

import (
	"context"
	"testing"

	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// ExpireLease moves the lease of row id, INPROGRESS, one second into the
// past, as if its owner had stalled or died that long ago, and fails the
// test when the row is not INPROGRESS. The next claim of the row's queue
// takes it again, with a higher generation (or ends it FAILED if that was
// its last attempt), and every later write of the stale owner is rejected
// with leasework.ErrLeaseLost. A running worker that owns the row notices
// at its next renewal, and cancels the handler with that cause.
//
// It is the project's internal ExpireLease fixture for a test: a fixture that bypasses
// the ownership guard on purpose, never to be used outside tests.
func ExpireLease(t testing.TB, ctx context.Context, s *lease.Store, id int64) {
	t.Helper()
	if s == nil {
		t.Fatalf("leaseworktest: ExpireLease: the store is nil")
	}
	if err := leasetest.ExpireLease(ctx, s, id); err != nil {
		t.Fatal(err)
	}
}

// MakeDue moves the next attempt of row id, READY, to now, as if its retry
// delay or snooze had passed, and fails the test when the row is not
// READY. A test fixture, like [ExpireLease].
func MakeDue(t testing.TB, ctx context.Context, s *lease.Store, id int64) {
	t.Helper()
	if s == nil {
		t.Fatalf("leaseworktest: MakeDue: the store is nil")
	}
	if err := leasetest.MakeDue(ctx, s, id); err != nil {
		t.Fatal(err)
	}
}
