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
// (Config.Concurrency, 1000 by default), in one statement. A worker serving
// several queues (Config.Queues) gives each its own slots and its own
// claims; slots are counted per worker, never across the table. After a
// full batch it claims again as soon as a slot frees. A slot frees when its
// handler returns, before its outcome is written, so claiming overlaps the
// writing of outcomes; the claims a worker holds, running or waiting for
// their outcome, never pass twice Concurrency. After a short batch it
// waits: for a LISTEN/NOTIFY notification, when the driver implements
// leasework.Notifier, or else for Config.PollInterval plus jitter. The
// table notifies when a write makes an event claimable (an enqueue, a
// release, a requeue, the next event of a key taking its turn), naming its
// kind, and when a queue is resumed; a worker wakes for its own kinds and
// for resumes. Notifications cannot announce retries and snoozes coming due
// or leases that expired, and for those the worker does not wait for the
// poll: after a claim that found nothing it reads when the earliest running
// lease runs out or the earliest waiting row comes due
// (lease.Store.NextWakeFrom, a few index entries), and claims again then, so a
// crashed worker's claims are taken over within tens of milliseconds of
// their expiry, and a retry runs when its delay ends. A claim that fails
// (the database restarting or failing over) is tried again after 50ms, then
// after waits doubling up to PollInterval, and at once when the listener
// connects again: notifications sent while the worker could not listen are
// lost, and the events behind them do not wait for the poll. Both shipped
// drivers listen on a connection of their own, outside the worker's pool,
// so the listener takes none of the pool's connections (driver/pgx also on
// a pool shared with the application through stdlib.OpenDBFromPool).
//
// Each claim of a queue reads its READY rows of each priority level from a
// floor one second before the latest due time the worker has claimed at
// that level (lease.ClaimRequest.DueFrom), and its expired leases from a
// floor one second before the database clock of its latest claim that
// took every expired lease it found (lease.ClaimRequest.ExpiredFrom), so
// that it does not walk the index entries of rows claimed and finished
// earlier, which vacuum cannot remove while a long transaction or a
// REPEATABLE READ reader pins the xmin horizon. At least once a second
// (and no more often than twenty times its own duration) a sweep claims
// from the oldest instead, beside the claim loop and on at most a tenth of
// the queue's free slots, so that a slow sweep never holds up the claims
// of new work; after a failed claim the loop's next claim reads from the
// oldest. A row committed more than a second after it came due, enqueued
// with a run time already past, or whose lease was moved back by hand, is
// claimed by a sweep, a second or so later than otherwise, never lost;
// a row cancelled while its owner ran it, whose owner never wrote again,
// is ended DISCARDED by a sweep once its lease has run out.
//
// # Leases and renewal
//
// A claim is owned for Config.Lease. One goroutine per worker renews the
// live claims under the full ownership guard (row id, generation,
// INPROGRESS, lease not expired): it wakes every Config.RenewEvery/2 and
// renews, in one statement, every claim whose last confirmed claim or
// renewal would otherwise be older than RenewEvery at its next wake-up. So
// each renewal is sent at most RenewEvery (at most Lease/2) after the last
// confirmation, wherever a claim falls between two wake-ups. The worker also
// keeps, for each claim, a local deadline: the local time taken before the
// last confirmed claim or renewal statement was sent, plus the lease, minus
// a tenth of it. The database's lease cannot end before that instant, so
// when the database cannot be reached the worker gives the claim up on its
// own before another worker can own it.
//
// A claim is renewed only while its handler can still use it: once the
// handler's context has ended (lease lost, attempt timeout, shutdown), the
// claim is no longer renewed unless the handler has returned and its
// outcome waits to be written. A handler that ignores its context therefore
// cannot hold its row: the lease expires, another worker claims the event
// again (the hung attempt counts against the row's budget), and the hung
// handler is counted in [Counters].HungHandlers.
//
// # When a handler's context is cancelled
//
// A handler's context is cancelled, and context.Cause tells which, when:
//
//   - a renewal, or a progress, step or output write, is rejected by the
//     database because the claim is no longer owned (another worker
//     claimed the row after the lease expired, or it was repaired): cause
//     leasework.ErrLeaseLost;
//   - a renewal is rejected because the event was cancelled from outside
//     (lease.Store.Cancel, leasework cancel): cause leasework.ErrCancelled,
//     at the claim's next renewal, within Config.RenewEvery. The event
//     stays INPROGRESS, holding its key, until the handler has returned:
//     the outcome the worker then writes is rejected as cancelled and ends
//     the event DISCARDED (a handler that does not return holds it until
//     its lease ends);
//   - no renewal was confirmed before the claim's local deadline (the
//     database is unreachable or too slow): cause
//     leasework.ErrLeaseUnconfirmed;
//   - the attempt ran longer than Config.AttemptTimeout: cause
//     leasework.ErrAttemptTimeout;
//   - the worker is stopping and the grace period is over, or
//     [Worker.StopNow] was called: cause leasework.ErrShutdown.
//
// ErrCancelled and ErrLeaseUnconfirmed also match leasework.ErrLeaseLost
// (errors.Is): a handler that only asks whether its claim is gone need not
// tell them apart. Nothing else cancels it: in particular not the end of
// the context given to Run, which starts the graceful stop instead. Values
// of Run's context are visible in handlers' contexts.
//
// # Outcomes
//
// What the handler returns decides the outcome, written under the ownership
// guard:
//
//   - nil: the event is completed (DONE, kept for Config.Retention, 24h by
//     default, so that its event id is still refused as a duplicate; or
//     deleted with Config.DeleteAtCompletion), unless a [Transactional]
//     handler already completed it in its own transaction;
//   - an error made with leasework.Permanent: FAILED with the error's text;
//   - an error made with leasework.RetryAfter(err, d): a failure like any
//     other, counted by the budgets, but retried after d instead of the
//     policy's delay;
//   - leasework.Snooze(d): READY again after d, and not a failure: the
//     row's budget grows by one, and the kind's [RetryPolicy], which counts
//     failures (leasework.Claim.Failures), never counts a snooze;
//   - any other error, a panic (recorded as a *leasework.PanicError with its
//     stack) or a timeout: retried after the delay of the kind's
//     [RetryPolicy], unless a budget is spent, in which case FAILED;
//   - a nil pointer returned as a non-nil error (`var e *MyErr; return e`),
//     or an error whose methods panic when read: retried like any other
//     error, with a text that says what the handler returned;
//   - any non-permanent error after the context was cancelled with
//     leasework.ErrShutdown: the claim is released to READY at once, and the
//     attempt it consumed is given back.
//
// Handlers hand their results to a queue that never blocks, so no handler
// and no claim waits behind a slow or stuck write. Outcomes are written in
// batches: while one statement is in flight, the next batch gathers, one
// statement per kind of outcome. A batch that fails because of the
// connection (or its statement timeout) is tried again whole, with a
// backoff of at most a second, for as long as each claim's lease can still
// be confirmed: until its local deadline (its last confirmed lease deadline
// less Lease/10), which the renewals sent meanwhile move on. So a database
// away for less than that (a restart) delays the outcomes and runs nothing
// twice. Past a claim's local deadline its outcome is given up, counted in
// [Counters].OutcomesAbandoned and, for a completion or a failure, in
// [Counters].RerunsFromAbandonedOutcomes: its lease expires and another
// claim runs the event again (delivery is at least once). Outcomes waiting
// are claims held, so there are at most twice Concurrency of them: past
// that the worker claims nothing until some are settled. A batch that
// fails for any other reason is written again claim by claim, so one value
// the database refuses never holds back the others; a claim whose own
// write keeps failing is abandoned after a few tries (counted as above and
// logged with its ids), and its lease expires. (A batch of completions
// over several keys that gives way to an enqueue of one of them, SQLSTATE
// 55P03, is written again claim by claim this way too.)
//
// Events with a key are handled one at a time per key, in enqueue order,
// whatever Concurrency is: the store hands out only each key's head (see
// "Order per key" in package lease). A handler's retry, a release at
// shutdown and a lost lease all keep the key's later events waiting. A
// completion that passes a key on may claim the key's next event for the
// worker that wrote it, in the completion's own statement
// (lease.Store.WriteManyTakingTurns), which starts it at once: without a
// claim statement, and without the write that would have made it READY.
// The worker asks for that only for a queue whose last claim found fewer
// rows than it could take, so no due event of the queue is passed over,
// for the queue with the most keyed completions in the batch, for no
// more events than the queue has free slots, and not once the worker has
// begun to stop.
//
// A write the database rejects because the claim is no longer owned is
// counted in [Counters].StaleRejections and logged; it is never followed by
// an unguarded write. A write found already recorded (an earlier try
// committed though its reply was lost) counts as done, and in
// [Counters].OutcomesReplayed. So does a write that finds its row deleted
// when an earlier try failed and the answer arrives before the claim's
// local deadline: no other worker can take a row whose lease has not
// expired, so only that earlier try can have moved it on.
//
// # Completing in the handler's transaction
//
// A handler that writes to the database holding the queue can commit its
// business writes and its completion together: [Transactional] adapts a
// [TxFunc] into such a handler, and its doc gives every case (a stale
// owner's writes rolled back with its rejected completion, a COMMIT whose
// outcome is unknown, the renewals that skip the locked row, the
// connections it may hold). Its transaction is the one the worker keeps
// open around a handler, at the handler's request: the worker's own
// statements (claims, renewals, outcomes) run outside it and never wait
// for it. Keep it short all the same: an open transaction keeps PostgreSQL
// from cleaning the row versions other writes leave behind meanwhile. A
// worker whose connection goes silent (a dead network) between the
// completion and COMMIT leaves the transaction open on the server, and its
// row locked, so that no other worker can take the event (nor, with a key,
// its followers) until the server ends the session: with PostgreSQL's
// defaults that can take hours, and idle_in_transaction_session_timeout
// bounds it.
//
// # Progress, steps and outputs
//
// A long handler can save a checkpoint with [RecordProgress]; the next
// attempt finds it in Claim.Progress. A handler made of named steps runs
// each with [Step]: a finished step's result is recorded under the
// ownership guard, and the event's later attempts get it back, decoded,
// instead of running the step again, so the handler resumes after its
// last finished step. A step's effects and its record are two writes, so
// a crash between them runs the step again (at least once per step);
// [StepTx], for a step whose effects are writes on the queue's database,
// records it in their transaction, so both commit or neither does.
// [RecordOutput] keeps the handler's output with the row
// (lease.Row.Output). Steps and outputs are bounded ([MaxStepSize],
// [MaxStepsSize], [MaxOutputSize]) and go with the row when retention or
// DeleteAtCompletion deletes it.
// [ClaimFromContext] returns the claim from a handler's context.
//
// # Periodic events
//
// [Worker.Schedule] adds a [Periodic] schedule before Run: a cron spec of
// five fields, as the standard parser of github.com/robfig/cron/v3 reads
// them ("0 3 * * *", in UTC unless it starts with TZ=<zone>), a descriptor
// (@hourly, @daily, ...) or a fixed interval ("@every 30s", which fires at
// the multiples of 30s since the Unix epoch). Each worker with schedules
// runs a scheduler, and there is no leader: every worker computes the same
// fire times and enqueues each firing in a transaction of its own, skipping
// duplicates, with the event id "<name>:<fire time in UTC, RFC 3339>" and
// the fire time as RunAt. The first insert wins; the other workers, and a
// worker restarted after it enqueued the firing, find the id there. So each
// firing is enqueued once, however many workers have the schedule.
//
// That holds while the firing's row is kept, which is why a worker with
// Config.DeleteAtCompletion refuses schedules: DONE rows are kept for
// Config.Retention, at least [DedupeWindow], and the scheduler never
// enqueues a firing older than [MissedLookback], an hour less. The workers
// that complete a schedule's events must keep their rows too (no
// DeleteAtCompletion, no early deletion of DONE rows by an operator).
// Workers sharing a table and a schedule's name must have the same
// schedule.
//
// A cron spec with a zone runs on the zone's clock, and a daylight-saving
// change skips or repeats some of its local times. A local time the clocks
// skip fires once, at the end of the gap: with "TZ=Europe/Paris 30 2 * * *",
// on 2026-03-29 (02:00 CET becomes 03:00 CEST) at 03:00 CEST, 01:00 UTC. A
// local time they repeat fires once, at its first occurrence: on 2026-10-25
// (03:00 CEST becomes 02:00 CET) at 02:30 CEST, 00:30 UTC, and not at 02:30
// CET. Local times that name the same instant are one firing, so an hourly
// or every-minute schedule fires once for the skipped hour, with the first
// tick after it, and is silent through the second pass of a repeated hour.
// The rule is the zone's and the spec's alone, so every worker computes the
// same fire times and event ids; for a steady rate through the changes, use
// a spec in UTC or @every.
//
// A firing that falls due while the database cannot be reached is enqueued
// once it can be (the scheduler logs the error and tries again after 1s,
// doubling up to 30s), unless a later firing has come due by then, which
// stands in for it. The firings that fell due before the worker started
// are [Periodic].Missed's: [MissedRunOnce], the default, enqueues the
// latest of them if it is less than MissedLookback old, and
// [MissedSkip] none. The scheduler stops with the claim loops, and every
// enqueue is bounded by a statement timeout.
//
// # Stopping
//
// When Run's context ends, the worker stops claiming, gives running
// handlers Config.GracePeriod to finish, cancels those still running with
// leasework.ErrShutdown, waits up to Config.StopTimeout for them to return
// and for the last outcomes to be written, and releases the claims of the
// handlers that gave up. [Worker.StopNow] cuts the grace period short.
//
// Run returns at most GracePeriod + StopTimeout after its context ends (at
// most StopTimeout after StopNow), whatever the handlers and the database
// do: with the defaults, 10s + 5s. Every statement of the stop is bounded by
// the time left. A handler still running at the end ignores its context;
// its claim is neither renewed nor released, so it expires, and the attempt
// counts against the row's budget; it is counted in [Counters].HungHandlers
// and logged with its ids. Go cannot kill a goroutine: such a handler keeps
// running after Run returns, harmlessly (its outcome is dropped and its
// claim is past renewal). Otherwise no goroutine outlives Run.
//
// # Observability
//
// Logs go to Config.Logger, slog.Default() when nil. A claim that fails (an
// unreachable database, a table never migrated) is logged with the store's
// error, which names the fix, and counted in [Counters].ClaimErrors.
// [Worker.Counters] returns the in-process counters, [Worker.Stats] the
// table's figures; [Worker.MetricsHandler] serves both in the Prometheus
// text format, with the standard library only, and series per kind and
// queue: leasework_kind_claimed_total, leasework_kind_outcomes_total (label
// outcome: completed, retried, snoozed or failed), and the histograms
// leasework_queue_wait_seconds (from an attempt's due time to its claim, by
// the database clock; reclaims are not counted) and leasework_run_seconds
// (the handler's run); and, read with the table's figures, each
// concurrency limit's: leasework_limit_live, leasework_limit_max and
// leasework_limit_held_back (the due rows the full limit holds back),
// labelled scope and name, with leasework_limits_up. The package
// registers nothing on a global mux, nor with expvar.
//
// For tracing and metrics of your own, [Worker.Observe] adds an
// [Observer]: told of each claim (its context becomes the handler's, so a
// span started there is the parent of the handler's spans), of each
// handler's return, and of how each outcome settled. The worker's own
// counters, per-kind series and outcome log lines are kept by its first
// observer, from those calls alone, so an observer of yours sees every
// fact they count. The leaseworkotel module (in contrib/otel) builds
// OpenTelemetry spans and metrics on it.
package framework
