// Package lease is the database boundary of leasework: the schema and its
// migrations, and every statement that reads or writes event rows. All SQL of
// the project lives here, one copy shared by every driver.
//
// # Ownership
//
// [Store.Claim] selects due READY rows and INPROGRESS rows whose lease has
// expired, with FOR UPDATE SKIP LOCKED, and in the same statement marks them
// INPROGRESS, increments their generation and sets their lease from the
// database clock. It commits before it returns. A claim, a requeue, a
// discard and a cancel that ends an event give the row a generation one
// above its own and at least the floor of the server's timeline,
// (timeline - 1) << 32: every generation given after a failover outranks
// every one given before it, so a claim lost with an old primary is never
// handed out again (on a server never promoted, generations count 1, 2, 3).
//
// Every other write of a claim is a [Write], made by one constructor per
// op ([Complete], [CompleteAndDelete], [Retry], [Snooze], [Fail],
// [Release], [Renew], [Progress], [Step], [Output]) and written by
// [Store.Write], [Store.WriteMany] or [Store.WriteTx]. Each is guarded by
//
//	id = $id AND status = 'INPROGRESS' AND generation = $gen
//	AND lease_until > clock_timestamp()
//
// (and the event not cancelled since the claim), and gets one [Verdict]:
// accepted, or rejected as lost, with the row read again to tell the
// rejections apart (already recorded by an earlier try whose reply was
// lost, cancelled, gone, busy ...). A rejected write changed nothing, and
// the caller must not follow it with an unguarded write.
//
// A batched write locks its rows first, in id order, then writes them: two
// batches over the same rows wait for each other in one order and never
// deadlock. Rows are always named by an id array and read through the
// primary key, whatever the statistics or a cached generic plan; each
// claim's generation (and the write's own values, such as a retry's error)
// is looked up by id in a jsonb object, never by joining the batch with
// unnest of its arrays, whose plan can cost the square of the batch. The
// cost of a write grows with its batch, not with the claims in flight.
//
// # Completing in the caller's transaction
//
// [Store.WriteTx] runs a guarded completion ([Complete], or
// [CompleteAndDelete] for a table that keeps no history) inside the
// caller's *sql.Tx, so that a handler writing to the same database commits
// its business writes and its completion together or not at all; its doc
// gives the rules (a stale owner's writes rolled back with its rejected
// completion, the row locked until the transaction ends, the renewals that
// skip it with [VerdictBusy]). It writes a step's record ([Step]) or an
// output ([Output]) the same way, so that a step whose effects are writes
// in the transaction is recorded with them or not at all.
//
// # Steps and outputs
//
// A [Step] write records the encoded result of a claim's named step with
// its row, with the generation that recorded it and when; every later
// claim of the row hands the steps on, by name, in
// leasework.Claim.Steps (framework.Step answers from them instead of
// running the step again). An [Output] write keeps the handler's output.
// Both are guarded like every other write, so a stale owner records
// neither. [Store.Get] and [Store.GetByEventID] read them ([Row].Steps,
// [Row].Output); [Store.List] leaves them out. A requeue keeps them; a
// row deleted by retention or at completion takes them with it.
//
// # Attempt budget
//
// Every claim counts as an attempt, including claims whose worker crashed.
// A row whose lease expires on its last allowed attempt becomes FAILED with
// a reason such as "lease expired on attempt 5 of 5" the next time any
// worker claims, instead of being claimed again. A retry on the last
// attempt also ends in FAILED. A [Snooze] adds one attempt to the budget,
// so it never spends it, and is counted in the row's snoozes, handed to the
// next claim as leasework.Claim.Snoozes; a crash adds nothing.
// [Store.Requeue] is the explicit repair path.
//
// # Order per key
//
// Events enqueued with the same non-empty [Event.Key] are handled one at a
// time, in the order their enqueuing transactions committed (within one
// transaction, in insertion order): only each key's head (its one READY,
// INPROGRESS or FAILED row) is claimable, and the events behind it are
// [leasework.StatusWaiting], a state the claim never reads. Two deferred
// constraint triggers (migration 4) keep this on every write path, the
// store's and a producer's own SQL alike, each under the key's
// transaction-scoped advisory lock, held from the start of a commit to its
// end and never across a business transaction. At the commit of an enqueue
// a keyed row takes its place in its key (key_seq), WAITING if the key has
// a live or waiting row; at the commit of a write that finished a key's
// head (completed, deleted, discarded, cancelled) the next waiting row
// becomes READY and listening workers are woken. Each trigger reads in a
// statement begun after it holds the lock, and PostgreSQL makes a commit
// visible before it releases its locks, so of two racing commits on one key
// the second sees the first. The store's own completions ([Complete] and
// [CompleteAndDelete] through [Store.Write] and [Store.WriteMany], each one
// statement that commits alone) pass their keys on themselves, all of a
// batch's at once, at the end of the statement, under the same locks (held
// from there to the commit) and by the same rule (migration 13); the
// triggers then skip those rows. Through [Store.WriteManyTakingTurns] they
// also claim, in the same write, the keys' next events that a claim of
// the worker's could take now, for that worker (migration 15): a next
// event so handed on is never READY, and runs after its head's completion
// committed, as any claim of it would. An enqueuing transaction's keyed rows,
// likewise, are listed as each insert ends and put in line all at once by
// the first firing of the commit-time trigger, their keys locked in key
// order (migration 14); a row that is not listed (a transaction that
// listed over 128 KiB of row ids, a trigger set IMMEDIATE) is put in line
// by its own firing.
//
// The key passes on in the commit that finished its head, so the order
// survives what the generation survives: a killed owner's head is claimed
// again, before its followers, once its lease expires; a paused owner's
// late completion is rejected and promotes nothing; a lost connection, a
// retry and a release at shutdown keep the followers waiting. A head never
// ends while its attempt may still run: a cancelled running head holds its
// key until the attempt stops or its lease ends ([Store.Cancel]), and a
// DELETE of a keyed INPROGRESS row under a running lease, other than its
// owner's [CompleteAndDelete], is refused (SQLSTATE 55006), saying to
// cancel it. A keyed event is claimable only once its enqueue has
// committed: a [Store.ClaimTx] in the enqueuing transaction does not take
// it. A FAILED head holds its key until [Store.Requeue] (it is then claimed
// again, before its followers) or [Store.Discard]; [Store.HeldKeys] shows
// the held keys and why.
//
// Each limit is an error, never a silent loss of order:
//
//   - keyed events must be enqueued and finished in READ COMMITTED
//     transactions, PostgreSQL's default: a REPEATABLE READ or SERIALIZABLE
//     one could not see the commits it waits for, and its commit is
//     refused with SQLSTATE 0A000;
//   - [Store.Enqueue] inserts a call's events in key order, so enqueues take
//     their keys' locks in one order and never deadlock with each other;
//     keyed events enqueued by several calls of one transaction, in
//     different key orders, can deadlock with a transaction doing the
//     opposite, and PostgreSQL aborts one (SQLSTATE 40P01);
//   - a transaction that finishes events of several keys waits for its
//     first key's lock like anyone, but tries for each later key's for
//     about 100ms only, then gives way with SQLSTATE 55P03 and rolls back
//     whole, rather than deadlock with an enqueue: an enqueue is never the
//     one to fail. Write such outcomes again one key per transaction (the
//     framework does, claim by claim; a [Store.WriteMany] statement's
//     writes then have [VerdictNoAnswer], with the 55P03 error). A
//     transaction that both finishes keyed events and enqueues events of
//     other keys can still deadlock with an enqueue of those keys
//     (SQLSTATE 40P01, to retry).
//
// # Bulk enqueue
//
// An enqueue sends its events in one INSERT (… VALUES for one event, …
// SELECT over arrays for more), or, for a batch of at least
// [Options.EnqueueCopyMin] events (300 by default) in a transaction that
// can, by COPY: a [leasework.CopyTx] (driver/pgx's WrapTx of a pgx.Tx,
// with pgx's CopyFrom) or a *sql.Tx of a driver that is a
// [leasework.Copier] (driver/pq, with lib/pq's COPY). pgx through
// database/sql has no COPY: its *sql.Tx always gets the INSERT; enqueue in
// a pgx.Tx for the COPY. Below the threshold the INSERT is cheaper: the
// COPY path runs three statements where the INSERT runs one (the row
// ids, then a COPY into each table); above it the COPY costs the server
// about a third less (docs/performance.md).
//
// Both paths write the same rows into the same tables, whose triggers and
// constraints check and order them alike, and [Store.Enqueue]'s promises
// hold for both: the checks before anything is sent, ErrDuplicateEvent for
// an id in the table or twice in the call (the first aborting the
// transaction), SkipDuplicates, the rows in key order and in the order
// given within a key, keys put in line at commit, metadata and due times
// checked by the schema, listeners woken at commit, the database's time
// for an event without RunAt, every event accounted for. The COPY takes
// the batch's row ids from the table's sequence and writes each event id
// beside its row id into the event id table first, then the rows; an
// enqueue that skips duplicates takes its ids as the INSERT does, then
// copies the rows. Two batches keep the INSERT whatever their size: one
// that mixes events with RunAt and without, and one skipping duplicates
// whose ids were freed and taken again while it ran. A COPY does not run
// the table's rules (the schema has none).
//
// # Queues and priorities
//
// Every event belongs to a queue (Event.Queue; [DefaultQueue] when empty)
// and has a priority from 0, the default, to [MaxPriority]. A claim reads
// one queue (ClaimRequest.Queue): its expired leases first, then its due
// READY rows, priority 0 before 1 and so on, in due order within a level.
// Priority is strict: while a queue always has due events of a level, its
// claims take none of a later one, unless the queue ages its events
// ([Store.SetAging]: a due event waiting longer than a threshold is
// claimed as one level higher). A worker gives each queue it serves its
// own handler slots (framework.Config.Queues).
//
// A queue is fair once its default weight is set ([Store.SetWeight] of a
// [Weight]): within a priority level, its claims take the events of its
// partitions ([Event].Partition) in proportion to their weights, by
// stride scheduling. Each partition with due events has a pass that grows
// by 1/weight for each of its events claimed; a claim takes the
// partitions furthest behind, up to the level its Limit raises them to. A
// partition comes to a fair queue through an arrival row, written by a
// trigger when its events are inserted or made READY again, and joins at
// the queue's lowest pass: behind no one's backlog, with no credit saved
// while it was idle. Claims of a queue neither fair nor aging run a
// statement without these reads.
//
// [Store.PauseQueue] stops every claim of a queue at once, expired leases
// included; handlers already running finish. [Store.ResumeQueue] lets
// claims take from it again and wakes listening workers. Pausing is a row
// in the table's queues table, which the claim reads by its primary key.
//
// # Concurrency limits
//
// [Store.SetLimit] declares a limit: at most N live attempts of a kind
// ([ScopeKind], in every queue) or of a queue ([ScopeQueue]), across every
// worker. The claim statement keeps it: a limit is kept in 16 slot rows,
// each a share of it that counts the attempts claimed in it, and a claim
// locks the ones it takes room from, SKIP LOCKED, in its own statement.
// An attempt is live, and holds its place, from its claim until it ends
// (any outcome, a release, a delete) or its lease runs out: a killed or
// paused owner's place goes to its row's next attempt, or to another row
// at a sweep, once its lease has run out, and its late writes are refused
// by the guard, as every stale owner's. An attempt that ends gives its
// place back by a row of the releases table, written in the statement
// that ends it, which the next claim of the slot counts; or a completion
// taking turns hands it on to the queue's next event, claimed in its
// statement ([Store.WriteManyTakingTurns]). A kind at its limit is
// skipped, not
// waited for: the claim takes other kinds' rows past it, and reports it
// ([Store.ClaimHeldBack]). See [Limit] for what a limit does not promise.
//
// A limit of [ScopePartition] holds each partition ([Event].Partition: a
// tenant, an account) to its own Max or the default, across kinds and
// queues. A partition under a limit has one slot row, made by the first
// claim that needs it and locked, SKIP LOCKED, by each claim that takes
// its rows. The due rows a full partition holds back are set aside: made
// WAITING, without a key, out of the READY index, so that a backlog behind
// full partitions costs claims nothing. Each claim first counts the places
// given back to other partitions' slots, under their locks, and makes READY
// again as many rows set aside as they have room for; the next claim takes
// them.
//
// [Store.SetRateLimit] declares a rate limit: at most M attempt starts of a
// kind or a queue in any window of a period ([RateLimit]), an event taking
// its [Event].Cost of them. It is kept in 16 shares, each holding the times
// of its latest starts; a claim locks the shares it takes starts from,
// SKIP LOCKED, as many as its rows' costs need, and records a start at its
// own time for each unit. A row a rate limit holds back stays READY, and
// [Store.NextWake] says when the window next has room for it.
//
// [Store.Limits] reads each limit with its live attempts and, while it is
// full, the due rows it holds back ([LimitInfo].HeldBack).
// [Store.WhyNotRunning] says, for one row, every reason it is not running
// now, each a [Reason] with a stable kind and a sentence for an operator:
// a full limit, its queue paused, its key's head before it, not due yet,
// its partition's limit full or the row set aside by it ([ScopePartition];
// [Row].Partition is a row's partition), a rate limit without room for
// its cost, with when the window has room ([ReasonRate]; [Row].Cost is a
// row's cost), its turn in a fair queue, its partition so many rows
// ahead of the one furthest behind ([ReasonFair]). [Store.RateLimits] reads each rate limit with its starts
// in the window and, while it is full, when it next has room.
//
// # Indexes
//
// Claim reads three partial indexes, one over READY rows by (queue,
// priority, due time), read one priority level at a time so that rows not
// yet due are never read, one over INPROGRESS rows by (queue, lease
// deadline), and one over the INPROGRESS rows on their last attempt, by the
// same, to end those whose lease expired FAILED without reading the other
// expired leases. Finished rows are in none, and a queue's claim reads no
// row of another queue, so the cost of a claim grows neither with the
// number of DONE and FAILED rows nor with the backlog of other queues, nor
// with the expired leases of a paused queue.
// Retention ([Store.DeleteFinished]) reads two more, over DONE rows and
// over DISCARDED rows, in finish order: FAILED rows, kept until repaired,
// are in none of them. Two serve order per key: WAITING rows by (key,
// key_seq), for the promotion, and live keyed rows by key, for "does this
// key have a head?". The claim also reads the running rows a cancel waits
// for, by lease deadline, to end those whose lease has run out.
//
// # Migrations
//
// [Store.Migrate] applies the embedded [Migrations] not yet recorded in
// the table's migrations table, each in a transaction of its own,
// serialized across processes by advisory locks (polled, never waited for
// inside a statement). Each step says whether it may be applied while
// workers run ([Migration.WhileWorkersRun]), and its header which locks
// it takes on the table, for how long, and what waits for them; and
// whether it must run outside a transaction ([Migration.NoTransaction]:
// indexes built CONCURRENTLY). [Migration.SQL] gives its SQL to teams
// that migrate with their own tool.
//
// # Metadata
//
// [Event.Metadata] is string pairs that travel with an event to each of
// its claims ([leasework.Claim.Metadata]) and its row ([Row.Metadata]),
// stored as jsonb: the enqueuer's trace context (the contrib/otel module
// puts it there through an [EnqueueMiddleware]), a tenant, a correlation
// id.
//
// # Rows a claim cannot decode
//
// The table refuses at insert what a claim could not decode, from
// producers that write it with their own SQL (SQLSTATE 23514, naming the
// column): metadata that is not NULL or an object of strings, a due time
// of infinity. A row written before that refusal (migration 10) may hold
// one. A claim never fails for it: it ends that row FAILED, with a last
// error naming the column, and returns the rest of its batch; reading the
// row gives it with [Row.DecodeError] set.
package lease
