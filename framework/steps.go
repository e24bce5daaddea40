package framework

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/handlerctx"
	"github.com/leasework/leasework/lease"
)

// MaxStepSize is the largest encoded result a step records; MaxStepsSize,
// the most all the steps of one event record together; MaxOutputSize, the
// largest output [RecordOutput] accepts. Steps and outputs are kept with
// the event's row and handed to each of its attempts: checkpoints and
// small results, not documents.
const (
	MaxStepSize   = 64 << 10
	MaxStepsSize  = 1 << 20
	MaxOutputSize = 64 << 10
)

var (
	// ErrStepTooLarge is matched by the error [Step] and [StepTx] return
	// for a result that encodes to more than [MaxStepSize] bytes, or that
	// would take the event's steps past [MaxStepsSize]. The step ran; its
	// record was not written. The error is permanent
	// (leasework.Permanent): returned by the handler, it fails the event
	// rather than run the step again into the same bound.
	ErrStepTooLarge = errors.New("framework: step result too large")

	// ErrOutputTooLarge is returned by [RecordOutput] for an output larger
	// than [MaxOutputSize]. Nothing was written.
	ErrOutputTooLarge = errors.New("framework: output too large")
)

// Step runs fn as the step name of the event ctx's handler runs, once
// across its attempts: the first attempt to finish the step records fn's
// result under the ownership guard, and every later attempt of the event
// (after a retry, a crash, a lost lease or a shutdown) gets the recorded
// result back without running fn again. A handler made of steps resumes
// after its last finished one.
//
// The result is encoded with encoding/json: T must round-trip through it
// (exported fields; a value that does not is refused before it is
// recorded). A step that returns an error records nothing and returns the
// error; the next call runs it again. Within one attempt a second call of
// the same name returns the first's result.
//
// What it promises: a step's record is written only by the claim's owner,
// so a paused owner that wakes up after its claim was taken over cannot
// record a step, and the attempt that replaced it never reads one from it.
// What it does not: a step's effects and its record are two writes, so an
// attempt killed after fn's effects and before the record runs fn again
// (at least once per step, as any handler). Make the effect idempotent, or
// make it in the queue's database with [StepTx], which commits the record
// with the effects.
//
// It returns an error matching leasework.ErrLeaseLost when the claim is no
// longer owned (the handler's context is then cancelled with that cause),
// [ErrStepTooLarge] for a result too large to record, an error for a bad
// name (empty, longer than lease.MaxStepNameBytes, not UTF-8, with NUL)
// before fn runs, and [ErrNoClaim] for a context that is not a handler's.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	return step(ctx, nil, name, func(ctx context.Context) (T, error) { return fn(ctx) })
}

// StepTx is [Step] for a step whose effects are writes in tx, a
// transaction on the queue's database (the one a [Transactional] handler
// runs in, or one the handler begins itself for this step): the step's
// record is written in tx, under the ownership guard, so it commits with
// fn's writes or not at all. After tx commits, the next attempts get the
// result back without running fn; if tx rolls back, the step is not
// recorded. A stale owner's record is rejected, and StepTx then rolls tx
// back (lease.Store.WriteTx): its effects are never committed.
//
// The record locks the event's row until tx ends: the worker's renewals
// skip it meanwhile (and renew its other claims), so commit well within
// the lease. Within one attempt, a step recorded in a transaction is not
// remembered: call each StepTx once per attempt.
func StepTx[T any](ctx context.Context, tx *sql.Tx, name string, fn func(ctx context.Context, tx *sql.Tx) (T, error)) (T, error) {
	if tx == nil {
		var zero T
		return zero, fmt.Errorf("framework: step %q: tx is nil", name)
	}
	return step(ctx, tx, name, func(ctx context.Context) (T, error) { return fn(ctx, tx) })
}

func step[T any](ctx context.Context, tx *sql.Tx, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	a, ok := handlerctx.From(ctx)
	if !ok {
		return zero, ErrNoClaim
	}
	if err := lease.CheckStepName(name); err != nil {
		return zero, err
	}
	if rec, ok := a.StepResult(name); ok {
		var v T
		if err := json.Unmarshal(rec, &v); err != nil {
			return zero, fmt.Errorf("framework: step %q: the recorded result does not decode into %T: %w", name, v, err)
		}
		return v, nil
	}
	v, err := fn(ctx)
	if err != nil {
		return v, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("framework: step %q: encode the result: %w", name, err)
	}
	if len(b) > MaxStepSize {
		return zero, leasework.Permanent(fmt.Errorf("%w: step %q encodes to %d bytes; at most %d are allowed", ErrStepTooLarge, name, len(b), MaxStepSize))
	}
	if err := a.RecordStep(ctx, tx, name, b); err != nil {
		return zero, err
	}
	return v, nil
}

// RecordOutput records output as the result of the event ctx's handler
// runs, under the ownership guard, kept with its row (lease.Row.Output)
// for the store, the console and the CLI to read. Each call replaces the
// previous output; a stale owner's is rejected. It returns an error
// matching leasework.ErrLeaseLost when the claim is no longer owned,
// [ErrOutputTooLarge] beyond [MaxOutputSize] bytes, and [ErrNoClaim] for a
// context that is not a handler's.
func RecordOutput(ctx context.Context, output []byte) error {
	a, ok := handlerctx.From(ctx)
	if !ok {
		return ErrNoClaim
	}
	if len(output) > MaxOutputSize {
		return fmt.Errorf("%w: %d bytes; at most %d are allowed", ErrOutputTooLarge, len(output), MaxOutputSize)
	}
	return a.RecordOutput(ctx, output)
}

// StepResult returns step name's result recorded by an earlier attempt,
// or by this one outside a transaction (handlerctx.Attempt).
func (a *attempt) StepResult(name string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.steps[name]; ok {
		return v, true
	}
	v, ok := a.claim.Steps[name]
	return v, ok
}

// RecordStep writes a step's record under the ownership guard, in tx when
// it is not nil (handlerctx.Attempt).
func (a *attempt) RecordStep(ctx context.Context, tx *sql.Tx, name string, value []byte) error {
	if err := a.checkStepsSize(name, len(value)); err != nil {
		return err
	}
	w := lease.Step(a.ref, name, value)
	if tx != nil {
		err := a.w.store.WriteTx(ctx, tx, w)
		a.loseOn(err, "rejected step")
		return err
	}
	deadline, _, stale := a.state()
	if stale || !time.Now().Before(deadline) {
		return fmt.Errorf("framework: record step %q of row %d generation %d: %w", name, a.ref.ID, a.ref.Generation, leasework.ErrLeaseLost)
	}
	err := a.w.steps.write(w, deadline)
	a.loseOn(err, "rejected step")
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.steps == nil {
		a.steps = map[string][]byte{}
	}
	a.steps[name] = value
	return nil
}

// RecordOutput writes the output under the ownership guard
// (handlerctx.Attempt).
func (a *attempt) RecordOutput(ctx context.Context, output []byte) error {
	return a.guardedWrite(ctx, "record output", lease.Output(a.ref, output))
}

// checkStepsSize refuses a step record that would take the event's steps
// past MaxStepsSize, counting those it knows: the claim's and this
// attempt's.
func (a *attempt) checkStepsSize(name string, n int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	total := n
	for k, v := range a.claim.Steps {
		if _, again := a.steps[k]; k != name && !again {
			total += len(v)
		}
	}
	for k, v := range a.steps {
		if k != name {
			total += len(v)
		}
	}
	if total > MaxStepsSize {
		return leasework.Permanent(fmt.Errorf("%w: step %q would take the event's steps to %d bytes; at most %d are allowed", ErrStepTooLarge, name, total, MaxStepsSize))
	}
	return nil
}

// guardedWrite makes a single-row write of the claim (a progress, step or
// output write) under the ownership guard, even when ctx is already
// cancelled, bounded by the claim's local lease deadline; a rejection
// ends the attempt as lost (or cancelled).
func (a *attempt) guardedWrite(ctx context.Context, what string, w lease.Write) error {
	deadline, _, stale := a.state()
	if stale || !time.Now().Before(deadline) {
		return fmt.Errorf("framework: %s of row %d generation %d: %w", what, a.ref.ID, a.ref.Generation, leasework.ErrLeaseLost)
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	_, err := a.w.store.Write(wctx, w)
	a.loseOn(err, "rejected "+w.Op().String())
	return err
}

// loseOn ends the attempt as lost, or cancelled, when err says the claim
// is no longer owned.
func (a *attempt) loseOn(err error, why string) {
	switch {
	case errors.Is(err, leasework.ErrCancelled):
		a.lose(why, leasework.ErrCancelled)
	case errors.Is(err, leasework.ErrLeaseLost):
		a.lose(why, leasework.ErrLeaseLost)
	}
}
