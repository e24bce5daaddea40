package framework

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/handlerctx"
	"github.com/leasework/leasework/lease"
)

// MaxProgressSize is the largest progress [RecordProgress] accepts: a
// checkpoint (an offset, a cursor, a page token), not a result.
const MaxProgressSize = 64 << 10

var (
	// ErrNoClaim is returned by [RecordProgress] for a context that does
	// not belong to a handler run by a [Worker] (or by leaseworktest).
	ErrNoClaim = errors.New("framework: context carries no claim")

	// ErrProgressTooLarge is returned by [RecordProgress] for progress
	// larger than [MaxProgressSize]. Nothing was written.
	ErrProgressTooLarge = errors.New("framework: progress too large")
)

// attemptFrom returns the worker's attempt ctx belongs to: not one a test
// runs (leaseworktest), which has no worker.
func attemptFrom(ctx context.Context) (*attempt, bool) {
	a, ok := handlerctx.From(ctx)
	if !ok {
		return nil, false
	}
	wa, ok := a.(*attempt)
	return wa, ok
}

// ClaimFromContext returns the claim a handler's context belongs to. The
// claim is the one passed to the handler; do not modify it.
func ClaimFromContext(ctx context.Context) (*leasework.Claim, bool) {
	a, ok := handlerctx.From(ctx)
	if !ok {
		return nil, false
	}
	return a.Claim(), true
}

var _ handlerctx.Attempt = (*attempt)(nil)

// Claim is the claim handed to the handler (handlerctx.Attempt).
func (a *attempt) Claim() *leasework.Claim { return &a.claim }

// RecordProgress stores progress for the claim ctx belongs to, under the
// ownership guard. The next attempt of the event (after a retry, a crash, a
// lost lease or a shutdown) receives the last progress recorded in
// Claim.Progress, so a long job can resume where it stopped instead of
// starting over. Each call replaces the previous progress.
//
// It writes even when ctx is already cancelled, so a handler told to stop
// can still save where it got to; the write is bounded by the claim's local
// lease deadline. It returns an error matching leasework.ErrLeaseLost when
// the claim is no longer owned (and the handler's context is then cancelled
// with that cause), [ErrProgressTooLarge] beyond [MaxProgressSize] bytes,
// and [ErrNoClaim] for a context that is not a handler's.
func RecordProgress(ctx context.Context, progress []byte) error {
	a, ok := handlerctx.From(ctx)
	if !ok {
		return ErrNoClaim
	}
	if len(progress) > MaxProgressSize {
		return fmt.Errorf("%w: %d bytes; at most %d are allowed", ErrProgressTooLarge, len(progress), MaxProgressSize)
	}
	return a.RecordProgress(ctx, progress)
}

// RecordProgress writes progress under the ownership guard
// (handlerctx.Attempt); see the package function.
func (a *attempt) RecordProgress(ctx context.Context, progress []byte) error {
	return a.guardedWrite(ctx, "record progress", lease.Progress(a.ref, progress))
}
