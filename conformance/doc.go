// Package conformance is leasework's exported test suite: the ownership
// guarantees, proved against a real PostgreSQL through any [leasework.Driver],
// and the driver's own duties: bounding dead connections, classifying
// errors.
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
// the product adds: renewal, release, progress, steps and outputs
// (StepsAreGuardedAndReachTheNextAttempts: a step recorded alone or in the
// caller's transaction reaches the next attempt byte for byte, a rolled
// back one does not, a stale owner's is rejected) and failure under the
// same guard, concurrent claimers, the attempt budget, the schema's own check,
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
//   - CopiedEnqueueKeepsEnqueuesPromises: an enqueue copied through the
//     driver's COPY (leasework.Copier; skipped when the driver has none)
//     stores each event as given, reports an existing id as
//     leasework.ErrDuplicateEvent, skips duplicates when asked, leaves
//     nothing when rolled back, and names an event the table dropped;
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
//   - LimitHoldsUnderConcurrentClaims, LimitSlotFreesAtLeaseEnd,
//     LimitComposesWithKeyOrder, KilledLimitHolderFreesItsSlotAtLeaseEnd
//     and PausedLimitHolderIsRefusedAfterItsSlotIsReused: a concurrency
//     limit (Store.SetLimit of a lease.Limit) holds across claimers. Eight
//     claimers through the driver, completing, retrying, releasing and
//     abandoning at random (seeded; the seed is logged) under a kind's
//     limit and a queue's, with abandoned leases expired by fixture
//     mid-run, never hold more live attempts than a limit allows, by a
//     reader's count in one snapshot and by their own tally, and finish
//     every row. An attempt whose owner is gone holds its slot until its
//     lease runs out and no longer: the next claim reclaims it, or, when
//     it cannot take the row back (another queue's), a claim without a
//     floor for expired leases takes the slot for another row; the old
//     owner's late writes are refused and free nothing. Under a limit, a
//     key's events still run one at a time in enqueue order, and a
//     completion taking turns (Store.WriteManyTakingTurns) hands its key's
//     next event over only when no limit covers it; under a limit it takes
//     no more events than the places it gave up. A child process holding the
//     one slot, killed with SIGKILL or stopped with SIGSTOP, keeps it until
//     the lease fixture, then the slot is reused; the stopped child,
//     continued, has its completion, renewal and release refused;
//   - PartitionLimitHoldsUnderConcurrentClaims,
//     KilledPartitionHolderFreesItsPlaceAtLeaseEnd,
//     PausedPartitionHolderIsRefusedAfterItsPlaceIsReused,
//     PartitionLimitComposesWithKeyOrder and
//     SetAsideRowsAllRunOncePlacesFree: a limit per partition
//     (lease.Limit of lease.ScopePartition, lease.Event.Partition; a
//     default and a partition's own) holds across claimers and queues.
//     Eight claimers through the driver, ending claims at random as above,
//     over six partitions in two queues, while a child process killed with
//     SIGKILL and one stopped with SIGSTOP hold a place each (their leases
//     expired by fixture mid-run, the stopped one continued once its row
//     was claimed again, its late writes refused), never hold more live
//     attempts of a partition than its limit, by a reader's count in one
//     snapshot and by their own tally, and finish every row. A killed or
//     stopped holder keeps its place until its lease runs out: then the
//     claim that takes its row back keeps the place, or a claim of another
//     queue without floors takes it for one of its rows, within three
//     claims (the bound the suite allows a place given back to go to a
//     row set aside), and the holder's late writes are refused. A
//     keyed event of a limited partition waits for its key's turn and a
//     place, keeps its key's order, is never set aside, and is never
//     handed on by a completion taking turns. The rows a full partition
//     sets aside (WAITING) all run: through every end of an attempt
//     (completion, retry, release, cancel, expiry, a completion in the
//     caller's transaction), a raise and a cleared limit, three claims in
//     a row take exactly the places freed, and none is left set aside;
//   - RateLimitHoldsInEveryWindowUnderConcurrentClaims,
//     HeldBackRowsRunOnceTheWindowMovesOn, RateLimitComposesWithKeyOrder
//     and RetriesAndTakeBacksTakeStarts: a rate limit (Store.SetRateLimit
//     of a lease.RateLimit) holds across claimers. Eight claimers of two
//     queues through the driver, ending claims at random as above, under
//     a kind's limit and a queue's of a short real period, some events
//     costing 2 to 4 starts, never start more than a limit allows in any
//     window of its period, wherever it begins, by the claims' own
//     statement times (a claim's lease ends a lease after it), each start
//     at its event's cost, first attempts, retries and leases taken back
//     alike, and finish every row. Under a period of an hour, aged by the
//     fixture (the starts moved into the past, never a wait), the
//     rows a full window holds back stay READY, none that fits is held
//     back (a claim of one row takes one that costs the whole limit),
//     nothing is taken half a period on, and all run, once each, as the
//     window moves on. A keyed event waits for its key's turn and for the
//     window, keeps its key's order, and is never handed on by a
//     completion taking turns. A retry and an expired lease taken back
//     each take their event's cost in starts, and an attempt that ends at
//     once or is released gives none back;
//   - FairClaimsSplitByWeightUnderConcurrentClaims and
//     IdlePartitionsShareIsUsedAndItsReturnWaitsForNoBacklog: a fair
//     queue (Store.SetWeight of a lease.Weight) shares its claims by
//     weight. Four claimers through the driver, in claims of 1 to 8 rows
//     completed at once, over two partitions with backlogs at weights 3
//     and 1, give the heavy one 3 rows for the light one's 1, within 10%,
//     of the first 1,000 claimed; while one partition alone has events it
//     gets every row of every claim, and a partition whose 10 events come
//     beside a backlog of 3,000 has them all claimed within the next 30
//     rows;
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
// # Dead connections
//
// Seven properties check the driver's own duties (leasework.Driver): six
// that every wait on a dead connection is bounded, through a TCP proxy of
// the suite's that blackholes the connections it carries (drops every
// byte, closes neither end, so that the kernel still acknowledges the
// packets and keepalives see nothing wrong) and a server that accepts
// connections and never answers; and one on the driver's name:
//
//   - DeadConnStatementEndsWithItsDeadline, DeadConnRowsEndWithTheirDeadline
//     and DeadConnTransactionEndsAndFreesItsConnection: a statement, a
//     query whose rows are being read and a statement in a transaction,
//     on a pool of one connection blackholed while their context's
//     deadline is ahead, return with an error that leasework.Classify
//     calls a lost connection; after the transaction, a ping on the pool
//     succeeds (it got its connection back);
//   - DeadConnListenerNoticesAndCloses: a listener whose connection is
//     blackholed ends Wait with an error by itself, and Close returns
//     (skipped when the driver is no leasework.Notifier, or its Listen
//     reports errors.ErrUnsupported for the pool);
//   - DeadConnHandshakeEndsWithTheContext and
//     DeadConnHandshakeEndsAtConnectTimeout: a ping on a pool whose server
//     never answers fails when the ping's context ends (200ms, with
//     connect_timeout=600), and when connect_timeout passes (1s, with no
//     deadline on the context);
//   - DriverNameIsAShortWord: Name is 1 to 32 ASCII letters, digits, '.',
//     '_' or '-', the same on every call.
//
// Each call must return within 30s: a liveness bound far above any a
// driver should document, so that reaching it means the call would have
// waited forever; each logs how long it took. The context's deadline is a
// fixture, not what is checked. An attempt that could not test the driver
// on a loaded machine is made again with twice the deadline, from 200ms up
// to 25.6s in eight tries: one whose deadline passed before the blackhole,
// before the silent server accepted the connection, or (for rows) before
// the rows already in flight at the blackhole ran out, so that the driver
// was never waiting on the dead connection when the deadline came.
//
// The pools come from Target.OpenDB or Driver.Open, as everywhere in the
// suite, for Target.DSN pointed at the proxy's (or the silent server's)
// address on 127.0.0.1: the suite reads the DSN in URL form (postgres://
// or postgresql://) or key=value form, takes its host (or hostaddr) and
// port (else $PGPORT, else 5432), a host starting with '/' being a unix
// socket directory, and writes the same DSN with host=127.0.0.1, the
// proxy's port and no hostaddr (and sslmode=disable for a unix socket,
// which carries no TLS). The six are skipped, saying why, for a DSN that
// gives no host (drivers differ in the one they take then), names several
// hosts or a service, asks for sslmode=verify-full (the certificate would
// be checked against 127.0.0.1), or does not parse; and when a unix
// socket's server refuses the same connection over TCP. Give such a
// target a DSN with one TCP host and port to run them.
//
// # The pool
//
// Every pool the suite works through comes from Target.OpenDB when it is
// set, and from Driver.Open otherwise: one to check that the database is
// reachable, then one per subtest, each closed when the subtest ends (the
// dead-connection properties open more, for the DSN pointed at their
// proxy, which OpenDB must honour). Set OpenDB to run the suite through a
// connector or pool options of your own (pgx's stdlib.OpenDB of a
// ConnConfig with a TLS config or tracer, lib/pq's connector, limits on
// the pool); the dead-connection properties then check the bounds of that
// pool. The pool must be of the same driver library: Driver classifies
// its errors and binds its arrays. This
// package's own tests run properties through both kinds, with a Driver
// whose Open fails (TestTargetOpenDB).
//
// # Child processes
//
// KilledWorkerClaimIsRecovered (and KilledHeadIsClaimedBeforeFollowers,
// KilledLimitHolderFreesItsSlotAtLeaseEnd,
// KilledPartitionHolderFreesItsPlaceAtLeaseEnd,
// PartitionLimitHoldsUnderConcurrentClaims) re-executes the test binary
// (os.Args[0]) with -test.run narrowed to itself, as os/exec's
// helper-process tests do; the child claims one row in autocommit mode,
// prints the claim, and waits to be killed with SIGKILL.
// PausedLimitHolderIsRefusedAfterItsSlotIsReused's child (and those of
// PausedPartitionHolderIsRefusedAfterItsPlaceIsReused and
// PartitionLimitHoldsUnderConcurrentClaims) waits instead for a line on
// its stdin, is stopped with SIGSTOP meanwhile, and once continued writes
// to its claim and prints how each write went. The child reaches Run through the same test function,
// so keep the code before Run cheap. The DSN and schema reach it through the
// environment; a func cannot, so the child opens its pool with the
// Target.OpenDB that the test function builds again in the child. Build
// the factory in the test function, from nothing the parent process set up
// before calling Run. On systems without SIGKILL (SIGSTOP, and a wait
// that reports a stopped child) the subtest is skipped;
// PartitionLimitHoldsUnderConcurrentClaims runs without its children.
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
// A subtest fails only when the store or the driver violated the property
// it names: rows returned, persisted state and exit signals are asserted,
// never timings, but for the dead-connection properties' generous
// liveness bound above (no verdict there depends on the machine's speed
// either: a deadline that passed too soon to test anything is tried again,
// longer). A subtest is skipped only for an optional capability the driver
// lacks (LISTEN/NOTIFY: leasework.Notifier not implemented, or its Listen
// reporting errors.ErrUnsupported for the pool, as a pool from
// Target.OpenDB may make it; COPY: leasework.Copier not implemented), with
// a message that names the capability,
// or for a DSN the dead-connection properties cannot point at their proxy,
// with a message that says so.
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
//
// The limit properties, per partition too, fail against a store whose
// every limit admits one attempt more than its Max (a SetLimit that
// declares Max + 1), and the rate properties against one whose every rate
// limit admits one start more (a SetRateLimit that declares Max + 1);
// TestLimitSelfTest asserts that, with ClaimThenComplete passing as a
// control. The rate properties fail too against a store whose rate limits
// count their starts over half their period (TestRateWindowSelfTest).
// The fairness properties fail against a store that sets no partition's
// own weight and learns of no partition when its events are inserted
// (TestFairSelfTest).
//
// Every required method of leasework.Driver fails a property when it is
// wrong. TestBrokenDrivers runs, in child processes, real drivers with one
// method broken, each against the properties that should catch it and a
// control: a Name with a slash, or empty (DriverNameIsAShortWord); a
// SQLState that finds nothing (ErrorsAreClassified,
// DuplicateEventIsRejected); an IsConnectionError always false
// (ErrorsAreClassified); an Array that returns the slice as is, for a
// database/sql driver that binds no slices itself (ClaimThenComplete and
// every property that claims, enqueues or writes a batch); and an Open
// that returns lib/pq's own pool, without driver/pq's bounds
// (DeadConnStatementEndsWithItsDeadline, DeadConnRowsEndWithTheirDeadline,
// DeadConnTransactionEndsAndFreesItsConnection,
// DeadConnHandshakeEndsWithTheContext).
package conformance
