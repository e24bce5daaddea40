package leaseworktest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/leaseworktest"
)

// TestSendEmail is the test of docs/testing.md (docs_test.go in the
// module's root checks the guide against it): a typed handler run without
// a worker, then the code under test asserted on in its own transaction.
func TestSendEmail(t *testing.T) {
	ctx := context.Background()
	_, err := leaseworktest.WorkKind(t, ctx, SendEmail, send, Email{To: ""}, leasework.Claim{Attempt: 3})
	if !leasework.IsPermanent(err) {
		t.Fatalf("no recipient: %v, want a permanent failure", err)
	}

	store := newStore(t) // a migrated table in a schema of the test's own
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := signUp(ctx, store, tx, "ada@example.com"); err != nil { // the code under test
		t.Fatal(err)
	}
	rows := leaseworktest.RequireEnqueuedKindTx(t, ctx, store.WrapTx(tx), store, SendEmail,
		&leaseworktest.EnqueuedOptions{Queue: "mail", Count: 1})
	if rows[0].Args.To != "ada@example.com" {
		t.Errorf("welcome e-mail to %q", rows[0].Args.To)
	}
}

// send is the handler under test: an e-mail needs a recipient.
func send(ctx context.Context, c *leasework.Claim, m Email) error {
	if m.To == "" {
		return leasework.Permanent(errors.New("no recipient"))
	}
	return nil
}

// signUp is the code under test: a sign-up enqueues its welcome e-mail in
// the caller's transaction.
func signUp(ctx context.Context, store *lease.Store, tx *sql.Tx, email string) error {
	_, err := SendEmail.Enqueue(ctx, store, tx, Email{To: email})
	return err
}

// newStore returns a migrated store in a schema of the test's own, dropped
// when the test ends.
func newStore(t *testing.T) *lease.Store {
	t.Helper()
	return pgtest.Store(t, pgx.New(), lease.Options{})
}
