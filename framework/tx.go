package framework

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
	"github.com/leasework/leasework/internal/handlerctx"
	"github.com/leasework/leasework/lease"
)

// TxFunc is the body of a handler made with [Transactional]: it makes the
// event's business writes in tx, a transaction on the worker's pool, and
// returns. It must not commit or roll back tx; [Transactional] does. ctx is
// the handler's context (see the package documentation for when it is
// cancelled); a cancelled ctx rolls tx back.
type TxFunc func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error

// Transactional returns a handler that completes its claim in the same
// transaction as its business writes, so that both commit or neither does
// (invariant 13 of the design): the effect of an event on the queue's own
// database is applied exactly once, even when a worker is killed, paused
// past its lease, or its claim is taken over.
//
// For each attempt it begins a transaction on the worker's pool, runs fn,
// runs the guarded completion in the same transaction (lease.Store.WriteTx,
// with lease.CompleteAndDelete under Config.DeleteAtCompletion) unless fn already
// did through [CompleteInTx], and commits:
//
//   - fn returns nil, the completion is accepted and COMMIT succeeds: the
//     event is DONE (or deleted) with its business writes, counted in
//     [Counters].Completed; the worker writes nothing more for the claim;
//   - fn returns an error or panics: the transaction is rolled back, and the
//     error (or the panic) is handled as any handler's: retried or failed;
//   - the completion is rejected because the claim is no longer owned: the
//     transaction is rolled back, taking fn's writes with it; the attempt
//     ends as lost (its context is cancelled with leasework.ErrLeaseLost),
//     is counted in [Counters].StaleRejections and [Counters].LeasesLost,
//     and the worker writes nothing for the claim (another owner has it).
//     When it was rejected because the event was cancelled while fn ran,
//     the cause is leasework.ErrCancelled, and once the handler has
//     returned the worker writes a release, rejected as cancelled too,
//     which ends the event (lease.Store.Cancel);
//   - the handler's context ends first (lease lost, attempt timeout,
//     shutdown): database/sql rolls the transaction back, and the attempt
//     ends as any cancelled attempt does;
//   - COMMIT fails with an error the server sent (a deferred trigger's at
//     commit, such as a key's lock given way, SQLSTATE 55P03, or a
//     deadlock): the server rolled the transaction back, and the error is
//     handled as any handler's: retried or failed;
//   - COMMIT fails otherwise: its outcome may be unknown (the connection
//     was lost while COMMIT was in flight, and the server may have
//     committed). The worker then writes the retry (or failure) the error
//     calls for, under the ownership guard, which waits for the row's lock:
//     if the transaction committed, the row is DONE at the claim's
//     generation (or, with DeleteAtCompletion, gone before the lease could
//     expire), the write is rejected, and the attempt is counted as
//     completed; if it did not, the retry is recorded and the next attempt
//     applies the effect. Either way the effect exists once.
//
// Between the completion and COMMIT the row stays locked: the worker's
// renewals skip it (they never wait for it, and renew the worker's other
// claims meanwhile), and no other worker can claim it. The claim's own
// lease is then no longer renewed, so commit well within the lease: the
// completion Transactional makes itself comes last, just before COMMIT.
//
// Each transaction holds a connection of the worker's pool from BEGIN to
// COMMIT. At most Config.TxConcurrency handlers hold one at once (50 by
// default, fewer on a pool capped below it plus ReservedConns); the others
// wait for a turn, their claims renewed meanwhile, so the worker's own
// claims, completions and renewals always find a connection.
//
// Transactional returns nil when fn is nil, which [Worker.Register]
// refuses. The handler it returns works only under a [Worker]; called with
// any other context it fails permanently with [ErrNoClaim].
func Transactional(fn TxFunc) leasework.Handler {
	if fn == nil {
		return nil
	}
	return &txHandler{fn: fn}
}

// CompleteInTx runs the claim's guarded completion in tx now, inside the
// [TxFunc] of a [Transactional] handler whose context is ctx and whose
// transaction is tx, instead of after fn returns. The completion takes
// effect when Transactional commits tx; the business writes made after it
// commit with it. Use it when fn must know whether the claim is still owned
// before it goes on (the completion is the fencing check); mind that the
// claim's lease is not renewed from then until COMMIT.
//
// It returns nil when the completion is accepted (a second call does
// nothing), an error matching leasework.ErrLeaseLost when the claim is no
// longer owned (tx is then rolled back: return the error), [ErrNoClaim] for
// a context that is not a handler's, and an error when ctx is not a
// Transactional handler's or tx is not its transaction.
func CompleteInTx(ctx context.Context, tx *sql.Tx) error {
	a, ok := handlerctx.From(ctx)
	if !ok {
		return ErrNoClaim
	}
	return a.CompleteInTx(ctx, tx)
}

// CompleteInTx runs the guarded completion in the attempt's transaction
// (handlerctx.Attempt); see the package function.
func (a *attempt) CompleteInTx(ctx context.Context, tx *sql.Tx) error {
	st, ok := ctx.Value(txKey{}).(*txState)
	switch {
	case !ok || st.a != a:
		return handlerctx.ErrNotTransactional
	case tx != st.tx:
		return handlerctx.ErrNotHandlersTx
	}
	return st.complete(ctx)
}

type txKey struct{}

type txHandler struct{ fn TxFunc }

// txState is one attempt's transaction.
type txState struct {
	a  *attempt
	tx *sql.Tx

	mu        sync.Mutex
	completed bool  // the completion was accepted in tx
	rejected  error // the completion was rejected: tx is rolled back
}

// complete runs the guarded completion in the attempt's transaction once.
func (st *txState) complete(ctx context.Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.completed:
		return nil
	case st.rejected != nil:
		return st.rejected
	}
	a := st.a
	w := lease.Complete(a.ref)
	if a.w.cfg.Retention == 0 {
		w = lease.CompleteAndDelete(a.ref)
	}
	err := a.w.store.WriteTx(ctx, st.tx, w)
	switch {
	case err == nil:
		st.completed = true
		a.setTx(txCompleting)
	case errors.Is(err, leasework.ErrLeaseLost):
		st.rejected = err
		a.setTx(txRejected)
		cause := leasework.ErrLeaseLost
		if errors.Is(err, leasework.ErrCancelled) {
			cause = leasework.ErrCancelled
		}
		a.lose("rejected completion in the handler's transaction", cause)
	}
	return err
}

func (st *txState) outcome() (completed bool, rejected error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.completed, st.rejected
}

func (h *txHandler) Handle(ctx context.Context, c *leasework.Claim) error {
	a, ok := attemptFrom(ctx)
	if !ok {
		return leasework.Permanent(fmt.Errorf("framework: Transactional handler: %w", errprefix.Trim("framework: ", ErrNoClaim)))
	}
	// Wait for a turn (Config.TxConcurrency): a transaction holds a
	// connection the worker's own statements need too.
	select {
	case a.w.txTurns <- struct{}{}:
		defer func() { <-a.w.txTurns }()
	case <-ctx.Done():
		return fmt.Errorf("framework: waiting for a turn to begin the handler's transaction: %w", context.Cause(ctx))
	}
	tx, err := a.w.store.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("framework: begin the handler's transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // also after a panic in fn
			a.setTx(txNone)
		}
	}()
	st := &txState{a: a, tx: tx}
	tctx := context.WithValue(ctx, txKey{}, st)
	err = h.fn(tctx, tx, c)
	if _, rejected := st.outcome(); rejected != nil {
		return rejected // whatever fn made of it
	}
	if err != nil {
		return err
	}
	if handled, err := breakTx(tctx, a, tx); handled { // false but in the chaos soak's deliberately broken builds (breaks_off.go)
		committed = true
		return err
	}
	if err := st.complete(tctx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			// Rolled back before COMMIT was sent: the context ended.
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			return fmt.Errorf("framework: the handler's transaction was rolled back before its commit: %w", err)
		}
		if drv := a.w.store.Driver(); drv.SQLState(err) != "" && leasework.Classify(drv, err) != leasework.ClassConnection {
			// The server answered COMMIT with an error (a deferred
			// trigger's, say: a key's lock given way, 55P03, or a
			// deadlock): it rolled the transaction back.
			committed = true // nothing left to roll back
			a.setTx(txNone)
			return fmt.Errorf("framework: the handler's transaction (row %d generation %d) was rolled back at its commit: %w",
				a.ref.ID, a.ref.Generation, err)
		}
		committed = true // or not: the outcome writer finds out
		a.setTx(txCommitUnknown)
		return fmt.Errorf("framework: commit of the handler's transaction (row %d generation %d) failed; it may have committed: %w",
			a.ref.ID, a.ref.Generation, err)
	}
	committed = true
	a.setTx(txCommitted)
	return nil
}

// txPhase is where an attempt of a Transactional handler stands.
type txPhase int

const (
	txNone          txPhase = iota
	txCompleting            // completion accepted in the open transaction
	txCommitted             // completed and committed
	txRejected              // completion rejected, transaction rolled back
	txCommitUnknown         // COMMIT failed: committed or not
)

func (a *attempt) setTx(p txPhase) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tx == txRejected && p == txNone {
		return // the rollback after a rejection keeps the rejection
	}
	a.tx = p
}

func (a *attempt) txPhase() txPhase {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tx
}
