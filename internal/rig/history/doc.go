// Package history checks what the chaos soak recorded against the promises
// leasework makes, after the run, in the spirit of Jepsen's Elle and
// Porcupine: the recorders only append what happened, and [Check] reads the
// whole [History] and returns every violation it finds, with counts of what
// it checked per property. It is pure: history in, verdict out; no
// database, no clock, no randomness.
//
// A history has four sources:
//
//   - the database's audit: every committed insert, update and delete of
//     an events row, with the row before and after, the writing session's
//     application_name and transaction, and the statement's time ([Write]);
//   - the worker processes: each handler's start and end as the handler saw
//     them, and what it returned ([Run]), appended to a file per process;
//     and when each process was known gone ([Process]);
//   - the business effects of Transactional handlers, written in the
//     handler's transaction ([Effect]);
//   - the test's own calls, with their invocation and return times and
//     their results: enqueues ([Enqueue]), cancels ([Cancel]), pauses of a
//     queue ([Pause]), settings of concurrency limits ([Limit]) and of
//     rate limits ([RateLimit]).
//
// Every time is one machine's wall clock: the database server, the worker
// processes and the test run side by side.
//
// # Properties
//
// A run of a handler is live from its start until the earliest of its end
// (or its process's death) and the end of its claim's lease: the last
// lease_until its generation was given by the claim, a renewal or the
// expiry fixture. A run that starts after its lease ended (a worker stopped
// between its claim and the handler's start, and resumed after another
// claim) is never live: it is a stale owner, whose writes are refused. A cancel, a discard or any other write that ends the
// claim in the database does not end the run's life: the handler runs on
// until it is told, and the promises must hold meanwhile.
//
//   - owners: every write is consistent with the one before it (the history
//     has no gap); a claim raises the generation, names its writer, takes a
//     due READY row or one whose lease has ended; every renewal and outcome
//     was written by the row's claimant at its generation while its lease
//     ran; every handler ran under a claim of its own worker; and at any
//     instant at most one run of a row is live.
//   - key_order: rows of a key take their places in the order their
//     enqueues committed (checked against the real-time order of the
//     acknowledged enqueues); none is claimed before every earlier row of
//     its key is finished (DONE or DISCARDED); and no run of a row starts
//     while a run of an earlier row of its key is live.
//   - terminal: every acknowledged enqueue exists and ends in exactly one
//     terminal state (DONE, FAILED, DISCARDED), never left: DONE and FAILED
//     at its last claim's generation, written by that claim's worker (or
//     by a claim that found its budget spent), DONE only after that claim's
//     handler returned nil; DISCARDED by a cancel that returned its
//     generation; and the state its payload asked for.
//   - effects: a Transactional kind's event has its business effect exactly
//     once when DONE, written in the completion's own transaction by the
//     final claim, and none otherwise: never a stale owner's.
//   - cancels: a cancel that returned a generation wrote it; the attempt it
//     cancelled committed no effect and no write after it; a cancel that
//     found the event finished found it so.
//   - ticks: each firing of a schedule has the event id of its fire time, a
//     fire time on the schedule's grid, and no other firing shares it.
//   - snoozes: a snooze sends the event back to READY after the delay asked
//     and grows its budget by one; a retry policy's attempt cap is reached
//     by attempts that were not snoozes.
//   - retries: a retry waits the delay the handler asked (RetryAfter), or
//     the policy's delay for its count of failures, snoozes not counted.
//   - pauses: no claim of a paused queue's row is made between the pause's
//     return and the resume's call: its statement begun after the one, its
//     write made before the other (its snapshot, which reads the pause, is
//     taken in between).
//   - limits: no claim of a kind or a queue under a concurrency limit makes
//     more attempts of it live than the limit in force for the claim: the
//     last setting that returned before the claim's statement began (the
//     larger of two while a setting was under way). A lowered limit lets
//     the attempts claimed before it run on outside it: those live at a
//     claim are allowed beyond its limit, but never beyond the largest
//     limit in force since the first of them was claimed. An attempt is
//     live here in the database, not in its handler: from its claim's
//     write to the earliest of the write that ends it (any write that
//     takes its row off its generation or out of INPROGRESS) and the end
//     of its lease (the last lease_until its generation got; a write that
//     moves it into the past, the expiry fixture, ends it at that write).
//   - partitions: the same for the limits per partition (Write.Partition):
//     no claim makes more attempts of a partition live than its own limit
//     in force, or the default's (Name empty) for a partition with none;
//     only a worker's claim sets a row aside (READY to WAITING, nothing
//     else changed), and only a keyless row of a partition; a keyless row
//     claimed from WAITING is one set aside (a claim with room takes it
//     so, or once brought back READY); and none is left set aside at the
//     end (inserted before Settled, still WAITING).
//     The owners property accepts a sweep that clears an attempt's
//     partition slot (State.PartitionSlot), as its kind's and queue's,
//     only once its lease ran out.
//   - rates: no window of a rate limit's period, wherever it begins, holds
//     more starts of its kind or queue than the Max in force: an attempt
//     starts at its claim's statement time (Write.Stmt, the time the store
//     records), whatever the claim took (a first attempt, a retry, an
//     expired lease taken back), and takes its row's cost (Write.Cost).
//     The windows checked end at each claim, (t - Per, t], as the store
//     counts at a claim of time t: every window holds no more starts than
//     the one that ends at its last. The starts counted are those of the
//     claims the limit surely bound (made after a setting returned); a
//     lowered Max keeps them, as the store does. The figures come from the
//     history, not from the store's counters.
//   - steps: every write that records a step (State.Steps) leaves its row
//     INPROGRESS at the generation it found, and records that generation,
//     whose run made the result (it names it): never a stale owner's
//     record in a row a newer claim holds, and no record is removed. Every
//     run that reached the soak's step (StepName) ran it exactly when its
//     claim found no record of it, and otherwise got back the record its
//     claim found: a recorded step is never run again.
package history
