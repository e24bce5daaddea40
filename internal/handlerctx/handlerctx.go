// Package handlerctx is what a handler's context carries: the attempt that
// runs it. A worker's attempt (framework) and a test's (leaseworktest)
// implement Attempt, and the framework's context functions
// (ClaimFromContext, RecordProgress, CompleteInTx) call it, whichever runs
// the handler.
package handlerctx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasework/leasework"
)

// Attempt is one handler call.
type Attempt interface {
	// Claim is the claim handed to the handler.
	Claim() *leasework.Claim
	// RecordProgress records progress (at most framework.MaxProgressSize
	// bytes, checked by the caller) for the next attempt.
	RecordProgress(ctx context.Context, progress []byte) error
	// CompleteInTx completes the claim in tx, the transaction a
	// Transactional handler runs in; ctx is the handler's.
	CompleteInTx(ctx context.Context, tx *sql.Tx) error
	// StepResult returns the encoded result of step name recorded by an
	// earlier attempt, or by this one outside a transaction.
	StepResult(name string) ([]byte, bool)
	// RecordStep records step name's encoded result (its name and size
	// checked by the caller), in tx when tx is not nil.
	RecordStep(ctx context.Context, tx *sql.Tx, name string, value []byte) error
	// RecordOutput records the handler's output (its size checked by the
	// caller).
	RecordOutput(ctx context.Context, output []byte) error
}

// The errors of CompleteInTx called outside the transaction of its
// Transactional handler, from either implementation.
var (
	ErrNotTransactional = errors.New("framework: CompleteInTx: the context is not a Transactional handler's")
	ErrNotHandlersTx    = errors.New("framework: CompleteInTx: tx is not the transaction Transactional began for this handler")
)

type key struct{}

// With returns ctx carrying a.
func With(ctx context.Context, a Attempt) context.Context {
	return context.WithValue(ctx, key{}, a)
}

// From returns the attempt ctx carries, if any.
func From(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(key{}).(Attempt)
	return a, ok
}
