package leaseworktest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/handlerctx"
	"github.com/leasework/leasework/lease"
)

// Result is what a handler run by [Work], [WorkKind] or [WorkTx] did,
// besides the error it returned.
type Result struct {
	// Claim is the claim the handler was given: the one passed in, its
	// unset fields filled in (see [Work]).
	Claim leasework.Claim
	// Progress holds what each framework.RecordProgress call of the
	// handler recorded, in order; nil when it recorded none. Under a
	// worker the last one is what the event's next attempt gets in
	// Claim.Progress.
	Progress [][]byte
	// CompletedInTx reports whether the handler's TxFunc called
	// framework.CompleteInTx (WorkTx only).
	CompletedInTx bool
	// Steps holds the encoded results of the steps the handler recorded
	// (framework.Step, framework.StepTx), by name; nil when it recorded
	// none. Under a worker the event's next attempts get them in
	// Claim.Steps: pass them in the Claim of a second call to test how the
	// handler resumes.
	Steps map[string][]byte
	// Output is what the handler last recorded with
	// framework.RecordOutput, or nil.
	Output []byte
}

// errReturned ends the context of a handler run by a test once it has
// returned, as a worker ends it.
var errReturned = errors.New("leaseworktest: the handler returned")

// Work runs h once with claim c, in the calling goroutine, as a worker's
// handler slot would, and returns what h returned, with the claim it was
// given and the progress it recorded. No worker, table or row is
// involved: it tests a handler's logic, not the write of its outcome.
//
// The fields of c left at their zero value are filled in as a first claim
// of a fresh event has them: ID 1, EventID a new random UUID, Attempt 1,
// Generation equal to Attempt, MaxAttempts [lease.DefaultMaxAttempts],
// Queue [lease.DefaultQueue], LeaseUntil [framework.DefaultLease] from
// now. Kind, Key, Payload, Progress, Steps, LastError, Priority, Snoozes
// and Reclaimed are handed over as given: set Progress, Steps and
// LastError, a later Attempt, Snoozes and Reclaimed, to test how a handler
// resumes or retries. A claim no worker could hand out (Attempt beyond MaxAttempts,
// Generation below Attempt, Snoozes not below Attempt, a negative field,
// Priority beyond [lease.MaxPriority]) fails the test.
//
// The handler's context is derived from ctx, and ends when ctx does; it is
// cancelled once the handler returns. In it:
//
//   - framework.ClaimFromContext returns the handler's claim;
//   - framework.RecordProgress checks the size, then keeps the progress in
//     [Result].Progress instead of writing it;
//   - framework.Step and framework.StepTx answer a step found in the
//     claim's Steps (or recorded by Step earlier in the call) from it, and
//     otherwise run it and keep its encoded result in [Result].Steps
//     instead of writing it (a StepTx's too, whether or not its
//     transaction commits: the test decides whether to pass it on);
//     framework.RecordOutput keeps the output in [Result].Output;
//   - framework.CompleteInTx, and a handler made by framework.Transactional,
//     need a transaction: test a TxFunc with [WorkTx]. Run by Work,
//     Transactional's handler fails with an error matching
//     framework.ErrNoClaim.
//
// Nothing else of a worker is there: no attempt timeout, no renewal, no
// lease to lose, no middleware (wrap h in yours), and no retry policy: the
// error is returned as it is, for the test to compare with
// leasework.Permanent, leasework.Snooze or leasework.RetryAfter. A panic in
// h is returned as the *leasework.PanicError a worker would record.
func Work(t testing.TB, ctx context.Context, h leasework.Handler, c leasework.Claim) (*Result, error) {
	t.Helper()
	if h == nil {
		t.Fatalf("leaseworktest: Work: the handler is nil")
	}
	return run(t, ctx, c, nil, h.Handle)
}

// WorkKind runs fn with args, as a worker would for an event of kind k
// registered with framework.HandleKind: args are encoded with k's codec
// into the claim's payload, and decoded from it again for fn, so fn sees
// what the codec carries (encoding/json drops unexported fields, say). A
// payload that does not decode is returned as the leasework.Permanent
// error HandleKind returns.
//
// c is the claim as in [Work]; its Kind is k.Name, its Queue, Priority and
// MaxAttempts default to k's. A c whose Kind is another or that carries a
// Payload fails the test: the payload is args'. A leasework.Claim{} is a
// first attempt.
func WorkKind[T any](t testing.TB, ctx context.Context, k lease.Kind[T], fn func(ctx context.Context, c *leasework.Claim, args T) error, args T, c leasework.Claim) (*Result, error) {
	t.Helper()
	switch {
	case fn == nil:
		t.Fatalf("leaseworktest: WorkKind %q: the handler is nil", k.Name)
	case c.Kind != "" && c.Kind != k.Name:
		t.Fatalf("leaseworktest: WorkKind %q: the claim's Kind is %q", k.Name, c.Kind)
	case c.Payload != nil:
		t.Fatalf("leaseworktest: WorkKind %q: the claim carries a Payload; the payload is the encoded args", k.Name)
	}
	e, err := k.Event(args)
	if err != nil {
		t.Fatalf("leaseworktest: WorkKind: %v", err)
	}
	c.Kind, c.Payload = e.Kind, e.Payload
	if c.Queue == "" {
		c.Queue = e.Queue
	}
	if c.Priority == 0 {
		c.Priority = e.Priority
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = e.MaxAttempts
	}
	return run(t, ctx, c, nil, func(ctx context.Context, c *leasework.Claim) error {
		args, err := k.Decode(c.Payload)
		if err != nil {
			return leasework.Permanent(err) // as framework.HandleKind
		}
		return fn(ctx, c, args)
	})
}

// WorkTx runs fn, the body of a handler made with framework.Transactional,
// in tx, a transaction the test began, with claim c filled in as [Work]
// fills it. In fn's context framework.CompleteInTx(ctx, tx) checks ctx and
// tx as under a worker, then records the call ([Result].CompletedInTx) and
// returns nil; there is no row to complete.
//
// WorkTx neither commits nor rolls back tx, whatever fn returns (under a
// worker, Transactional rolls back after an error and commits after nil):
// the test looks at what fn wrote in tx, with its own queries or
// [RequireEnqueuedTx], then rolls tx back.
func WorkTx(t testing.TB, ctx context.Context, tx *sql.Tx, fn framework.TxFunc, c leasework.Claim) (*Result, error) {
	t.Helper()
	switch {
	case tx == nil:
		t.Fatalf("leaseworktest: WorkTx: tx is nil")
	case fn == nil:
		t.Fatalf("leaseworktest: WorkTx: the function is nil")
	}
	return run(t, ctx, c, tx, func(ctx context.Context, c *leasework.Claim) error { return fn(ctx, tx, c) })
}

// run fills c in, checks it, and calls handle with a handler's context
// carrying it.
func run(t testing.TB, ctx context.Context, c leasework.Claim, tx *sql.Tx, handle func(context.Context, *leasework.Claim) error) (*Result, error) {
	t.Helper()
	c = fill(c)
	if why := check(c); why != "" {
		t.Fatalf("leaseworktest: a worker never hands out this claim: %s", why)
	}
	a := &attempt{claim: &c, tx: tx}
	hctx, cancel := context.WithCancelCause(handlerctx.With(ctx, a))
	err := call(hctx, &c, handle)
	cancel(errReturned)
	a.mu.Lock()
	defer a.mu.Unlock()
	return &Result{Claim: c, Progress: a.progress, CompletedInTx: a.completedInTx, Steps: a.steps, Output: a.output}, err
}

// attempt is a handler call a test makes: what framework.ClaimFromContext,
// RecordProgress and CompleteInTx act on when no worker runs the handler.
// Nothing is written to a database: a test's claim has no row.
type attempt struct {
	claim *leasework.Claim
	tx    *sql.Tx // the transaction of WorkTx, or nil

	mu            sync.Mutex
	progress      [][]byte
	completedInTx bool
	steps         map[string][]byte
	inTx          map[string]bool // the steps recorded in a transaction
	output        []byte
}

var _ handlerctx.Attempt = (*attempt)(nil)

func (a *attempt) Claim() *leasework.Claim { return a.claim }

// RecordProgress keeps a copy of progress for the Result.
func (a *attempt) RecordProgress(_ context.Context, progress []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.progress = append(a.progress, slices.Clone(progress))
	return nil
}

// CompleteInTx records that the handler asked for its completion in tx,
// after the checks a worker makes.
func (a *attempt) CompleteInTx(_ context.Context, tx *sql.Tx) error {
	switch {
	case a.tx == nil:
		return handlerctx.ErrNotTransactional
	case tx != a.tx:
		return handlerctx.ErrNotHandlersTx
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.completedInTx = true
	return nil
}

// call runs handle, turning a panic into the *leasework.PanicError a worker
// records.
func call(ctx context.Context, c *leasework.Claim, handle func(context.Context, *leasework.Claim) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &leasework.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return handle(ctx, c)
}

// fill sets the fields of c left at their zero value as a fresh event's
// first claim has them.
func fill(c leasework.Claim) leasework.Claim {
	if c.ID == 0 {
		c.ID = 1
	}
	if c.EventID == "" {
		c.EventID = uuid.NewString()
	}
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	if c.Generation == 0 {
		c.Generation = int64(c.Attempt)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = lease.DefaultMaxAttempts
	}
	if c.Queue == "" {
		c.Queue = lease.DefaultQueue
	}
	if c.LeaseUntil.IsZero() {
		c.LeaseUntil = time.Now().Add(framework.DefaultLease)
	}
	return c
}

// check says why no worker could be handed c, or "" when one could.
func check(c leasework.Claim) string {
	switch {
	case c.ID < 0:
		return fmt.Sprintf("ID is %d", c.ID)
	case c.Attempt < 0:
		return fmt.Sprintf("Attempt is %d", c.Attempt)
	case c.MaxAttempts < 0:
		return fmt.Sprintf("MaxAttempts is %d", c.MaxAttempts)
	case c.Attempt > c.MaxAttempts:
		return fmt.Sprintf("Attempt %d is beyond MaxAttempts %d", c.Attempt, c.MaxAttempts)
	case c.Snoozes < 0:
		return fmt.Sprintf("Snoozes is %d", c.Snoozes)
	case c.Snoozes >= c.Attempt:
		return fmt.Sprintf("Snoozes %d is not below Attempt %d: snoozes are counted among the earlier attempts", c.Snoozes, c.Attempt)
	case c.Generation < int64(c.Attempt):
		return fmt.Sprintf("Generation %d is below Attempt %d: every attempt is a claim, and every claim adds one to the generation", c.Generation, c.Attempt)
	case c.Priority < 0 || c.Priority > lease.MaxPriority:
		return fmt.Sprintf("Priority is %d; it must be between 0 and %d", c.Priority, lease.MaxPriority)
	}
	return ""
}

// StepResult returns the step's result from the claim's Steps, or from a
// step the handler recorded in this call outside a transaction, as a
// worker's attempt does.
func (a *attempt) StepResult(name string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.steps[name]; ok && !a.inTx[name] {
		return v, true
	}
	v, ok := a.claim.Steps[name]
	return v, ok
}

// RecordStep keeps a copy of the step's result for the Result. A step
// recorded in a transaction is kept too: the test decides whether it
// commits.
func (a *attempt) RecordStep(_ context.Context, tx *sql.Tx, name string, value []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.steps == nil {
		a.steps, a.inTx = map[string][]byte{}, map[string]bool{}
	}
	a.steps[name] = slices.Clone(value)
	a.inTx[name] = tx != nil
	return nil
}

// RecordOutput keeps a copy of the output for the Result.
func (a *attempt) RecordOutput(_ context.Context, output []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.output = slices.Clone(output)
	return nil
}
