// Package testclaim carries a claim in a handler's context when a test, not
// a worker, runs the handler (leaseworktest.Work and its kin). The
// framework's context functions (framework.ClaimFromContext,
// framework.RecordProgress, framework.CompleteInTx) look here when the
// context holds no attempt of a worker, so that a handler using them can be
// tested without a worker. Nothing here is used by a running worker.
package testclaim

import (
	"context"
	"database/sql"
	"slices"
	"sync"

	"github.com/leasework/leasework"
)

// Attempt is one handler call made by a test.
type Attempt struct {
	// Claim is the claim handed to the handler.
	Claim *leasework.Claim
	// Tx is the transaction a TxFunc runs in (leaseworktest.WorkTx), or
	// nil for a plain handler.
	Tx *sql.Tx

	mu            sync.Mutex
	progress      [][]byte
	completedInTx bool
}

type key struct{}

// With returns ctx carrying a.
func With(ctx context.Context, a *Attempt) context.Context {
	return context.WithValue(ctx, key{}, a)
}

// From returns the attempt ctx carries, if any.
func From(ctx context.Context) (*Attempt, bool) {
	a, ok := ctx.Value(key{}).(*Attempt)
	return a, ok
}

// RecordProgress keeps a copy of progress, as framework.RecordProgress
// would write it.
func (a *Attempt) RecordProgress(progress []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.progress = append(a.progress, slices.Clone(progress))
}

// Progress returns every progress recorded, in order.
func (a *Attempt) Progress() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.progress)
}

// CompleteInTx records that the handler asked for its completion in its
// transaction.
func (a *Attempt) CompleteInTx() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.completedInTx = true
}

// CompletedInTx reports whether the handler asked for its completion in
// its transaction.
func (a *Attempt) CompletedInTx() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.completedInTx
}
