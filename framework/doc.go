// Package framework is leasework's runtime: a worker that claims events,
// runs their handlers under renewed leases, records their outcomes and stops
// gracefully. It is meant to be embedded in an existing service.
//
//	w, err := framework.New(db, pgx.New(), framework.Config{})
//	...
//	err = w.Register("email", leasework.HandlerFunc(send), framework.RetryPolicy{})
//	...
//	err = w.Run(ctx) // until ctx ends, then a graceful stop
//
// Several workers, in one process or many, share one table: each claim is
// exclusive, and a worker only claims the kinds it has a handler for.
//
// # Claiming
//
// The worker claims as many due rows as it has free handler slots
// (Config.Concurrency), in one statement. After a full batch it claims again
// as soon as a slot frees. After a short batch it waits: for a LISTEN/NOTIFY
// notification that an event of one of its kinds was inserted, when the
// driver implements leasework.Notifier, or else for Config.PollInterval plus
// jitter. Polling also finds what notifications cannot announce: retries
// coming due and leases that expired. A driver that listens through the
// worker's pool (driver/pgx) keeps one of its connections for as long as Run
// runs; size the pool for it.
//
// # Leases and renewal
//
// A claim is owned for Config.Lease. One goroutine per worker renews every
// live claim with one statement every Config.RenewEvery, under the full
// ownership guard (row id, generation, INPROGRESS, lease not expired). The
// worker also keeps, for each claim, a local deadline: the local time taken
// before the last confirmed claim or renewal statement was sent, plus the
// lease, minus a tenth of it. The database's lease cannot end before that
// instant, so when the database cannot be reached the worker gives the claim
// up on its own before another worker can own it.
//
// # When a handler's context is cancelled
//
// A handler's context is cancelled, and context.Cause tells which, when:
//
//   - a renewal or a progress write is rejected by the database because the
//     claim is no longer owned (another worker claimed the row after the
//     lease expired, or it was repaired): cause leasework.ErrLeaseLost;
//   - no renewal was confirmed before the claim's local deadline (the
//     database is unreachable or too slow): cause leasework.ErrLeaseLost;
//   - the attempt ran longer than Config.AttemptTimeout: cause
//     leasework.ErrAttemptTimeout;
//   - the worker is stopping and the grace period is over, or
//     [Worker.StopNow] was called: cause leasework.ErrShutdown.
//
// Nothing else cancels it: in particular not the end of the context given
// to Run, which starts the graceful stop instead. Values of Run's context
// are visible in handlers' contexts.
//
// # Outcomes
//
// What the handler returns decides the outcome, written under the ownership
// guard:
//
//   - nil: the event is completed (DONE, or deleted when Config.Retention
//     is zero);
//   - an error made with leasework.Permanent: FAILED with the error's text;
//   - any other error, a panic (recorded as a *leasework.PanicError with its
//     stack) or a timeout: retried after the delay of the kind's
//     [RetryPolicy], unless a budget is spent, in which case FAILED;
//   - any non-permanent error after the context was cancelled with
//     leasework.ErrShutdown: the claim is released to READY at once, and the
//     attempt it consumed is given back.
//
// Outcomes are written in batches: while one statement is in flight, the
// next batch gathers, one statement per kind of outcome. A write the
// database rejects because the claim is no longer owned is counted in
// [Counters].StaleRejections and logged; it is never followed by an
// unguarded write. A write that fails with a database error is tried again
// with backoff while the claim's local deadline allows; past it, the lease
// expires and another worker claims the event again (delivery is at least
// once).
//
// # Progress
//
// A long handler can save a checkpoint with [RecordProgress]; the next
// attempt finds it in Claim.Progress. [ClaimFromContext] returns the claim
// from a handler's context.
//
// # Stopping
//
// When Run's context ends, the worker stops claiming, gives running
// handlers Config.GracePeriod to finish, cancels those still running with
// leasework.ErrShutdown, waits for them, writes their outcomes, and releases
// their claims. [Worker.StopNow] cuts the grace period short. No goroutine
// outlives Run. A handler that ignores its context keeps Run waiting.
//
// # Observability
//
// Logs go to Config.Logger (none by default). [Worker.Counters] returns the
// in-process counters, [Worker.Stats] the table's figures; both are served
// in the Prometheus text format by [Worker.MetricsHandler] and as JSON by
// [Worker.Expvar], with the standard library only.
package framework
