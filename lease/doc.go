// Package lease is the database boundary of leasework: the schema and its
// migrations, and every statement that reads or writes event rows. All SQL of
// the project lives here, one copy shared by every driver.
//
// # Ownership
//
// [Store.Claim] selects due READY rows and INPROGRESS rows whose lease has
// expired, with FOR UPDATE SKIP LOCKED, and in the same statement marks them
// INPROGRESS, increments their generation and sets their lease from the
// database clock. It commits before it returns.
//
// Every other write of a claim is a [Write], made by one constructor per
// op ([Complete], [CompleteAndDelete], [Retry], [Snooze], [Fail],
// [Release], [Renew], [Progress]) and written by [Store.Write],
// [Store.WriteMany] or [Store.WriteTx]. Each is guarded by
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
// its business writes and its completion together or not at all. A stale
// owner's completion is rejected with leasework.ErrLeaseLost and WriteTx
// rolls the transaction back itself: the stale owner's business writes are
// undone with it, and a Commit that follows by mistake returns
// sql.ErrTxDone. An accepted completion holds the row's lock until the
// transaction ends; nobody can claim the row meanwhile (claims skip locked
// rows), and the completion takes effect at COMMIT. If the transaction rolls
// back, the claim is INPROGRESS and owned, as before.
//
// Renewals never wait for such a transaction: a [Renew] skips a locked row
// and is answered [VerdictBusy], neither renewed nor lost, and the rest of
// its batch is renewed at once.
//
// # Attempt budget
//
// Every claim counts as an attempt, including claims whose worker crashed. A
// row whose lease expires on its last allowed attempt becomes FAILED with a
// reason such as "lease expired on attempt 5 of 5" the next time any worker
// claims, instead of being claimed again. A retry on the last attempt also
// ends in FAILED. A [Snooze] adds one attempt to the
// budget, so it never spends it, and is counted in the row's snoozes,
// handed to the next claim as leasework.Claim.Snoozes; a crash adds
// nothing. [Store.Requeue] is the explicit repair path.
//
// # Order per key
//
// Events enqueued with the same non-empty [Event.Key] are handled one at a
// time, in the order their enqueuing transactions committed: only each
// key's head (its one READY, INPROGRESS or FAILED row) is claimable, and
// the events behind it are [leasework.StatusWaiting], a state the claim
// never reads. Two deferred constraint triggers (migration 4) keep this on
// every write path, the store's and a producer's own SQL alike: at the
// commit of an enqueue a keyed row takes its place in its key, and at the
// commit of a write that finished a key's head the next waiting row
// becomes READY. A FAILED head holds its key until [Store.Requeue] or
// [Store.Discard]; [Store.HeldKeys] shows the held keys and why. The guide
// docs/order-per-key.md in the repository says how the triggers order
// racing commits, what survives what, and the limits (READ COMMITTED
// transactions only; one call per transaction's keyed events; a batch over
// several keys that gives way with SQLSTATE 55P03).
//
// # Queues and priorities
//
// Every event belongs to a queue (Event.Queue; [DefaultQueue] when empty)
// and has a priority from 0, the default, to [MaxPriority]. A claim reads
// one queue (ClaimRequest.Queue): its expired leases first, then its due
// READY rows, priority 0 before 1 and so on, in due order within a level.
// Priority is strict: while a queue always has due events of a level, its
// claims take none of a later one. To keep bulk work from starving, or
// being starved, put it in a queue of its own: a worker gives each queue it
// serves its own slots (framework.Config.Queues).
//
// [Store.PauseQueue] stops every claim of a queue at once, expired leases
// included; handlers already running finish. [Store.ResumeQueue] lets
// claims take from it again and wakes listening workers. Pausing is a row
// in the table's queues table, which the claim reads by its primary key.
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
