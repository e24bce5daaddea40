// Package leaseworktest helps applications test the code they write
// against leasework, as River's rivertest does for River: run a handler
// without a worker, assert what a transaction enqueued, expire a lease.
// It is meant for the application's own tests (it takes a testing.TB and
// fails the test); nothing in it belongs in production code.
//
// # Running a handler
//
// [Work] runs a handler once against a claim the test constructs, in the
// test's goroutine: no worker, no table. The claim's unset fields are
// filled in as a fresh event's first claim has them, so a test sets only
// what it is about (the payload, a later attempt, the progress an earlier
// attempt recorded):
//
//	res, err := leaseworktest.Work(t, ctx, leasework.HandlerFunc(publish),
//		leasework.Claim{Kind: "order.placed", Payload: []byte(`{"order":42}`)})
//
// In the handler's context framework.ClaimFromContext returns the claim and
// framework.RecordProgress keeps what it is given in [Result].Progress.
// [WorkKind] does the same for a typed kind (lease.Kind[T]), encoding and
// decoding the arguments as framework.HandleKind does; [WorkTx] runs the
// body of a framework.Transactional handler in a transaction the test
// owns, where framework.CompleteInTx is recorded in [Result].CompletedInTx.
// The handler's error is returned as it is: the retry policy, the attempt
// timeout, the renewals and the outcome's write are the worker's, tested
// by leasework's own suite.
//
// # What a transaction enqueued
//
// [RequireEnqueuedTx] returns the rows of a kind's events visible in a
// transaction, uncommitted ones included, and fails the test when none
// matches [EnqueuedOptions] (queue, priority, key, status, count). The
// transaction is any library's, as [leasework.Tx]: lease.Store.WrapTx
// adapts a *sql.Tx, driver/pgx's WrapTx a pgx.Tx;
// [RequireNotEnqueuedTx] fails when one does. [RequireEnqueued] and
// [RequireNotEnqueued] read the committed rows of a store's table.
// [RequireEnqueuedKindTx] and [RequireEnqueuedKind] decode each row's
// arguments with a kind's codec. They read the table directly, whichever
// driver the store uses, and a failure lists the rows of the kind that did
// not match.
//
// # Leases
//
// [ExpireLease] ends a claim's lease now, as if its worker had died, so
// that a test sees the event claimed again and the stale owner fenced
// off, without waiting for the lease; [MakeDue] makes a retry or a
// snoozed event due now. They fail the test instead of returning an
// error. This package is the one test kit for applications; the fixtures
// leasework's own suites use beside it are internal.
//
// The tables of leasework's own tests live in a fresh schema per test
// (lease.Options.Schema); a test of an application does well to do the
// same, so that the rows it asserts on are its own.
package leaseworktest
