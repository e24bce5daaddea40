// Package conformance is leasework's exported test suite: the ownership
// guarantees, proved against a real PostgreSQL through any [leasework.Driver].
//
// A driver author calls [Run] from an ordinary test:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Target{
//			Driver: mydriver.New(),
//			DSN:    os.Getenv("LEASEWORK_DSN"),
//		})
//	}
//
// Every property is a subtest that works in a schema of its own, created and
// dropped around it, so the suite can share a database with anything else.
// The role needs CREATE on the database.
//
// # The lab's six tests
//
// Six subtests reproduce the lab article "Kill the Outbox Worker", under
// these names: ClaimThenComplete, UncommittedClaimIsSkippedThenRestored,
// KilledWorkerClaimIsRecovered, StaleOwnerCannotComplete,
// StaleOwnerCannotRetry and ExpiredOwnerCannotFinalize. The rest cover what
// the product adds: renewal, release, progress and failure under the same
// guard, concurrent claimers, the attempt budget, the schema's own check,
// requeue and enqueue. Among them, for batches and bad input:
//
//   - ConcurrentBatchesNeverDeadlock: renewals, completions and retries of
//     overlapping claims, given in opposite orders, never deadlock (rows are
//     locked in id order);
//   - AnyErrorTextIsStored: a text with a NUL byte, invalid UTF-8 or over
//     lease.MaxErrorBytes is stored cleaned and never fails its batch;
//   - ReplayedOutcomeIsAlreadyRecorded and
//     StaleOrDeletedIsNeverAlreadyRecorded: an outcome written twice by the
//     same claim is reported recorded (lease.VerdictRecorded), a stale
//     owner's never is, and a deleted row is gone (lease.VerdictGone);
//   - StaleOwnerCompleteTxRollsBackItsWrites,
//     LiveOwnerCompleteTxCommitsBoth,
//     RolledBackCompleteTxLeavesTheClaimOwned and
//     RenewalSkipsARowLockedByACompletion: a completion in the caller's
//     transaction (lease.Store.WriteTx of lease.Complete or
//     lease.CompleteAndDelete) commits with the business writes of a live
//     owner, rolls back a stale owner's writes with its rejection, leaves
//     the claim owned when the transaction rolls back, and never makes a
//     renewal wait (the locked row is reported busy, lease.VerdictBusy,
//     neither renewed nor lost). They keep their business rows in a table
//     of the subtest's schema;
//   - InCallDuplicateKeepsTheFirst, EnqueueAccountsForEveryEvent and
//     EnqueueRefusesTextPostgreSQLCannotStore: enqueue reports every event it
//     was given, and refuses bad text before sending anything;
//   - FIFOPerKeyUnderConcurrentClaimersAndEnqueuers,
//     FailedHeadHoldsItsKey, KilledHeadIsClaimedBeforeFollowers and
//     OrderSurvivesReleasePausedOwnerAndRetry: events of one key are
//     claimed one at a time in enqueue order, under many claimers and
//     enqueuers, across abandoned claims, retries, releases, stale owners
//     and kills; a FAILED event holds its key until requeued or discarded.
//     A batch of completions over several keys may give way to an enqueue
//     with SQLSTATE 55P03 (see lease's package doc); the suite then writes
//     its claims one by one, as the framework does;
//   - QueuesNeverShareEventsUnderConcurrentClaimers,
//     ClaimTakesPriorityThenDueOrder and PausedQueueGivesNothingUntilResumed:
//     four concurrent claimers of two queues, over rounds with expired
//     leases in both, each get only rows of their own queue (a third
//     queue's READY rows and expired leases stay untouched), never an (id,
//     generation) twice, and finish every row; claims taken one at a time
//     come priority 0 first, then 1 and on to 9, and within a level by
//     next_attempt_at then id, skipping rows not yet due whatever their
//     priority; a paused queue (Store.PauseQueue) gives nothing, not even
//     an expired lease, while another queue runs and a live claim of it
//     records its outcome, and after Store.ResumeQueue gives its rows again;
//   - CancelledAttemptCannotWriteAnything,
//     CancelledEventIsNeverClaimedAndPassesItsKeyOn and
//     CancelNeverUndoesACommittedCompletion: once Store.Cancel has marked a
//     running event (INPROGRESS at its attempt's generation,
//     lease.CancelResult.Stopping), every write of its attempt is rejected:
//     renewals, progress, completions in a transaction (WriteTx:
//     ErrLeaseLost, the transaction's business write rolled back) change
//     nothing; its first outcome write ends it DISCARDED at a new
//     generation, and after that renew, complete, retry, snooze, fail and
//     release, batched (WriteMany) or single (Write), match
//     leasework.ErrCancelled and ErrLeaseLost (lease.VerdictCancelled, for
//     the cancelled claim only, not for a merely stale one beside it) and
//     change nothing. A cancelled event is never claimed, from READY,
//     WAITING or an expired lease; a cancelled head, READY, INPROGRESS or
//     FAILED, passes its key to the next event, a running one only once its
//     attempt has stopped, and a cancelled follower is passed over. A
//     cancel that meets a completion committing in the owner's transaction
//     is lease.ErrFinished, the row DONE; one that meets it rolling back
//     wins;
//   - SnoozeIsGuardedAndSparesTheBudget: a snooze (lease.Snooze) by a
//     stale or expired owner is ErrLeaseLost and changes nothing; the
//     owner's, on its last attempt, sends the row READY due after the
//     delay (by the database's clock) with its budget one larger and the
//     snooze counted apart from failures (lease.Row.Snoozes,
//     leasework.Claim.Snoozes), is recorded (lease.VerdictRecorded) when
//     written again, and the row is claimed again once due (by fixture)
//     with exactly one more attempt.
//
// # The pool
//
// Every pool the suite works through comes from Target.OpenDB when it is
// set, and from Driver.Open otherwise: one to check that the database is
// reachable, then one per subtest, each closed when the subtest ends. Set
// OpenDB to run the suite through a connector or pool options of your own
// (pgx's stdlib.OpenDB of a ConnConfig with a TLS config or tracer, lib/pq's
// connector, limits on the pool). The pool must be of the same driver
// library: Driver classifies its errors and binds its arrays. This
// package's own tests run properties through both kinds, with a Driver
// whose Open fails (TestTargetOpenDB).
//
// # Child processes
//
// KilledWorkerClaimIsRecovered (and KilledHeadIsClaimedBeforeFollowers)
// re-executes the test binary (os.Args[0]) with
// -test.run narrowed to itself, as os/exec's helper-process tests do; the
// child claims one row in autocommit mode, prints the claim, and waits to be
// killed with SIGKILL. The child reaches Run through the same test function,
// so keep the code before Run cheap. The DSN and schema reach it through the
// environment; a func cannot, so the child opens its pool with the
// Target.OpenDB that the test function builds again in the child. Build
// the factory in the test function, from nothing the parent process set up
// before calling Run. On systems without SIGKILL the subtest is skipped.
//
// # Lease expiry is a fixture
//
// No subtest waits for a lease to run out: each moves lease_until into the
// past with an explicit fixture and says so. No subtest depends on the speed
// of the machine; each has a watchdog that fails it after two minutes.
//
// # Servers on any timeline
//
// A claim's generation is never less than the floor of the server's
// timeline, (timeline - 1) * 2^32 (see lease): a server that was promoted
// or restored, as a managed database is after a failover, starts the
// generations of its rows at 2^32 or above. Each subtest reads the floor
// once, with the statement the claim uses, and expects every generation
// relative to it: exactly the first claim's generation, one more per later
// claim or repair. The suite holds on any timeline and still fails when a
// generation is off by one.
//
// # No false positives
//
// A subtest fails only when the store violated the property it names: rows
// returned, persisted state and exit signals are asserted, never timings. A
// subtest is skipped only for an optional capability the driver lacks
// (LISTEN/NOTIFY: leasework.Notifier not implemented, or its Listen
// reporting errors.ErrUnsupported for the pool, as a pool from
// Target.OpenDB may make it), with a message that names the capability.
//
// # Proving the suite can fail
//
// This package's own tests hold the lab's unsafe store (baseline_test.go,
// built on lease's public API; it ships in no package): a lease.Store whose
// claims see only due READY rows (of the queue asked for) and whose
// completions and retries (lease.Complete, lease.Retry and lease.Snooze in
// its WriteMany) key on the row id alone. Run with Target.NewStore set to
// it, exactly four of the lab's six subtests fail
// (KilledWorkerClaimIsRecovered, StaleOwnerCannotComplete,
// StaleOwnerCannotRetry, ExpiredOwnerCannotFinalize) and two pass, as in
// the article; TestBaselineSelfTest asserts that.
package conformance
