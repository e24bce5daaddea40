// Package leasework is the contract of leasework: the types that users and
// driver authors code against.
//
// leasework runs user handlers on rows of a PostgreSQL table under leases
// fenced by a generation number. A worker that is killed after committing its
// claim never strands the row: once the lease expires, another worker claims it
// again with a higher generation. A worker that stalls and comes back late can
// never overwrite the claim that replaced it: every outcome write carries the
// generation it was claimed with, and a stale one is rejected with
// [ErrLeaseLost].
//
// # Parts
//
//   - This package: [Handler], [Claim], the sentinel errors, [Permanent] and the
//     [Driver] interface. It imports nothing else of the module.
//   - lease: the database boundary (schema, migrations and every guarded
//     statement).
//   - framework: the runtime that claims, runs handlers, renews and records
//     outcomes.
//   - driver/pgx and driver/pq: the two shipped drivers.
//   - conformance: the exported suite that proves a driver keeps the guarantees.
//
// # What is not promised
//
// Delivery is at least once. A handler that publishes to a broker and is then
// killed before its completion is recorded will see the event again, with the
// same [Claim.EventID] and a higher [Claim.Generation]. Consumers deduplicate
// on the event id.
package leasework

import "context"

// Handler runs one claimed event.
//
// Returning nil completes the event. Returning an error schedules a retry
// under the kind's retry policy, unless the error is wrapped with [Permanent]
// or the attempt budget is spent, in which case the event is marked FAILED
// with the error's text. Returning [Snooze] runs the event again later, and
// is not a failure: the claim counts attempts, snoozes and failures apart
// ([Claim.Attempt], [Claim.Snoozes], [Claim.Failures]), and a retry policy
// counts only failures.
//
// The context ends when the lease is lost (context.Cause matches
// [ErrLeaseLost]; it is [ErrCancelled] when the event was cancelled, and
// [ErrLeaseUnconfirmed] when the worker could not confirm its lease in
// time), when the worker shuts down, or when the attempt times out. A handler should
// return promptly once ctx is done; whatever it returns after losing its lease
// is rejected by the database and changes nothing.
type Handler interface {
	Handle(ctx context.Context, c *Claim) error
}

// HandlerFunc adapts an ordinary function to a [Handler].
type HandlerFunc func(ctx context.Context, c *Claim) error

// Handle calls f(ctx, c).
func (f HandlerFunc) Handle(ctx context.Context, c *Claim) error { return f(ctx, c) }
