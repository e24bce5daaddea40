// Package chaos holds the chaos soak: a test, bounded in faults and in
// time, that runs events of every feature a user can turn on through
// several worker processes while a fault injector kills, pauses,
// disconnects and silences them and restarts the PostgreSQL server under
// them (and, in the long run, fails it over to its standby), records the
// whole history of the run, and checks it afterwards with
// internal/rig/history.
//
// The package has no code of its own: everything is in its tests.
//
//	go test -race -run Soak -v ./internal/rig/chaos/                             # the short run, as CI runs it
//	LEASEWORK_SOAK=long go test -run Soak -v -timeout 60m ./internal/rig/chaos/  # 260 faults of each kind, 40 failovers
//	LEASEWORK_SOAK_SEED=123 go test -run Soak -v ./internal/rig/chaos/           # replay a run's schedule
//	LEASEWORK_SOAK_TRACE=1 go test -run Soak -v ./internal/rig/chaos/            # log every fault and cancel as it is done
//	LEASEWORK_SOAK_FAULTS=2 LEASEWORK_SOAK=long go test -run Soak -v ./internal/rig/chaos/  # the long run's configuration, 2 faults of each kind
//	LEASEWORK_SOAK_HISTORY=h.json go test -run Soak -v ./internal/rig/chaos/     # keep the history, as JSON
//	LEASEWORK_BREAK=steal-leases go test -tags leasework_break -run Soak -v ./internal/rig/chaos/  # a deliberate break, caught
//
// The seed fixes the schedule: the order of the faults, the gaps between
// them, the choice of worker among those free, the events enqueued, the
// cancels' and the pauses' timing and targets among those found. The
// timing of what the workers and the server do in between is the
// machine's, so a replay repeats the faults, not every interleaving.
//
// # What runs
//
// The test starts a throwaway cluster of its own (it restarts it, so it
// never uses the server named by $LEASEWORK_DSN), in the long run with a
// synchronous streaming standby, and four worker processes: the test
// binary run again, drivers pgx and pq alternating, each through a
// loopback proxy of its own, with its worker id as application_name. Each
// serves three queues (default, bulk, and a probe queue of its own) and
// has the same periodic schedule ("@every 1s"). The workers of the first
// three slots (both drivers) write a batch of outcomes whose completions
// take turns as two statements at once from two outcomes on, as a worker
// with more slots does from 128 (internal/tune): the run fails when none
// did. The kinds:
//
//   - plain: runs a step (framework.Step, whose result names the
//     generation that ran it), then writes a receipt (event id,
//     generation, worker) into a sink table in a statement of its own, the
//     stand-in for an external system; a hold records a step every 250ms
//     while it holds, as a long job records where it got to;
//   - tx: a framework.Transactional handler whose business write (a row
//     in an effects table) and completion share one transaction;
//   - snoozy: snoozes one to three times (leasework.Snooze), fails once,
//     then succeeds, under a retry policy that caps attempts at 3;
//   - tick: the schedule's firings;
//   - edge: writes a receipt; under a limit of one, for the slow renewals
//     (below);
//   - a probe kind per worker, for the recovery checks.
//
// Payloads ask the plain and tx handlers to succeed, to fail for good, to
// fail once, to ask for a retry after a delay of their own
// (leasework.RetryAfter), or to hold their handler (until its context ends,
// or a few seconds). Retry policies have no randomization, so that the
// history can check every delay. An enqueuer keeps adding events in small
// transactions, in turns through pgx (one INSERT) and lib/pq (COPY: its
// store's EnqueueCopyMin is 1), keeping the backlog bounded (a busy
// machine gets fewer events, not a longer drain): three in ten of the
// plain and tx events
// keyed, over two hundred cold keys and three hot ones, and now and then a
// chain, a holding head with events behind it on a fresh key; events
// without a key spread over the queues and priorities, a few scheduled for
// later. Some events are of a tenant, t-0 to t-3 (lease.Event.Partition):
// a quarter of the keyless plain and tx events, the events of one cold
// key in four, and now and then a burst of two to four keyless events of
// one tenant, in the default or the bulk queue. A canceller cancels running chain heads most, and other running,
// waiting, not yet due and finished events. The bulk queue is paused and
// resumed now and then.
//
// Concurrency limits are declared before the workers start, small enough
// to bind: the tx kind at 2 live attempts (48 handler slots of the four
// workers serve it), the bulk queue at 3 (16 serve it), the edge kind at
// 1; and per partition, every tenant at 2 (the default) but t-0 at 1
// (its own), so that claims set rows aside and bring them back. The
// snoozy kind has a rate limit of 12 starts in any 500ms, a quarter of
// its events costing 2: about what the enqueuer asks on average, so that
// bursts reach it and what it holds back drains within seconds. The bulk
// queue is fair across tenants (lease.Weight: each weighs 1, t-1 3) and
// ages its priorities after 300ms (lease.Store.SetAging), so that its
// claims run the statement of fair and aging queues (partitions coming
// by arrivals, leaving when they have nothing due, coming back on a
// retry) under every fault; the history checks that none of its events
// is lost or run twice, as for every queue. While the
// faults are done, the tx kind's limit is lowered to 1 now and then, for
// a while, and raised again once the attempts claimed before the lowering
// have ended (a raise while one of them runs lets the store admit more
// than any limit set: see limitLoop); each setting is recorded with its
// call's and its return's times. Now and then the test holds the edge
// kind's slot with a claim of its own (as a worker named soak-edge: the
// event enqueued and claimed in one transaction), enqueues two more
// events of the kind, and renews its claim 400ms before the lease runs
// out, its commit held 1.2s by a deferred trigger, as a slow synchronous
// standby would hold it: the claims made meanwhile see the lease over in
// their snapshot, and the holder's row locked. Then it releases its claim
// (a slow renewal). One more is made after the last fault, so that every
// run makes one.
//
// # The faults
//
// On a schedule drawn from a seed (math/rand/v2's PCG; the seed is printed
// at the start and in every failure), each of these happens the same number
// of times, overlapping on different workers:
//
//   - kill: SIGKILL a worker and start a replacement;
//   - stop: SIGSTOP a worker holding claims, expire its leases with the
//     fixture (never a wait; a row its stopped Transactional handler has
//     locked is left to its lease), wait until another worker claimed one
//     of its rows again, then SIGCONT it: its late writes must be refused;
//   - terminate: pg_terminate_backend of every backend of one worker, its
//     LISTEN connection included (a terminate that found the listener
//     connecting again, and so hit none, is not counted and is done again);
//   - blackhole: the worker's proxy stops forwarding on every open
//     connection without closing it;
//   - restart: fast shutdown of the server, and start again;
//   - failover (the long run's): the primary crashes, its synchronous
//     standby is promoted, every proxy (the test's sessions have one too)
//     is pointed at it, and the old primary rejoins as its standby.
//
// After each fault the worker concerned (every worker, after a restart or
// a failover) must recover by itself within a bound counted from the fault
// or from the server's return, whichever is later: it handles a probe
// event of a kind only it serves, and it listens again on a connection
// opened after the fault.
//
// # The history, and what is checked
//
// The run is recorded as it goes, each recorder only appending: an AFTER
// trigger on the events table appends every committed insert, update and
// delete, the row before and after with the writer's application_name,
// transaction and statement time (the audit: every claim, renewal,
// outcome, promotion, cancel and fixture); each worker process appends its
// handlers' starts and ends, with what they returned, to a file of its
// own; the Transactional handlers' effects carry their transaction; the
// test records its enqueues, cancels and pauses with their call and return
// times and results, and when each worker process was gone. After the run,
// internal/rig/history checks the whole history: at most one live owner per
// row at any instant (owners); per key, handler runs never overlap and
// follow commit order (key_order); every acknowledged enqueue ends in one
// terminal state at its last claim's generation (terminal); one business
// effect per DONE Transactional event and none for a stale owner
// (effects); a cancelled attempt's effect never commits (cancels); one
// firing per schedule tick (ticks); snoozes never spend a budget
// (snoozes); retries wait the delay asked or the policy's (retries); no
// claim of a paused queue (pauses); no claim makes more attempts of a
// limited kind or queue live in the database than the limit in force for
// it (limits: the live attempts counted at each claim, from its write to
// the write that ends each or its lease's end; after a lowering, those
// claimed before it may run beside, up to the old limit); the same per
// tenant, under its own limit or the default, and no row set aside left
// behind (partitions); no window of 500ms, wherever it begins, holds more
// starts of the snoozy kind than its rate limit, each claim (a first
// attempt, a retry, an expired lease taken back) a start of its event's
// cost at its statement's time, read from the audit, not from the
// store's counters (rates); a sweep may take the place of an expired attempt
// (clear its kind, queue or partition slot) only once its lease ran out
// (owners). A history with violations
// is written to the temporary directory, and the run says where; beside
// it, the audit of the limits' slots (which the checker does not read),
// for the diagnosis of a limits violation: which slot each claim took,
// and of the rate limit's shares, which starts each recorded.
//
// Besides: every event enqueued before the drain finishes, every worker
// picks up a probe well within PollInterval (30s) by NOTIFY after the last
// fault, stops with status 0 on SIGTERM within a bound, and none exited by
// itself, panicked or hung; every property checked something, each limit
// was reached (t-0's own, and the default by another tenant), a claim set
// a row aside, a window of the rate limit's period held its Max, and a
// slow renewal was made. The run ends with its
// figures (for each limit and each Max it had, the claims checked, the
// most attempts live and the claims that reached it) and, last, the
// history's verdict:
//
//	soak limits (… settings; slow renewals …, failed …; rows set aside by partition limits …): kind tx under 1: … claims (… handed on by completions), at most 1 live, … reached it; kind tx under 2: …; queue bulk under 3: …; kind edge under 1: …; partition t-0 under 1: …; partition t-1 under 2: …
//	soak rate limits: kind snoozy under 12 per 500ms: … claims, … starts, at most 12 in a window, … reached it
//	soak: seed=… events=… kill=… stop=… terminate=… blackhole=… restart=… failover=… duplicates=… reruns=… (outside faults …) stale_rejected=… pickup_after_restart=…
//	history: ok owners=… key_order=… terminal=… effects=… cancels=… ticks=… snoozes=… retries=… pauses=… limits=… partitions=… rates=…
//
// # Deliberate breaks
//
// A checker that cannot fail proves nothing. Built with the leasework_break
// tag, the library has deliberate breaks (lease/breaks_on.go,
// framework/breaks_on.go; never in a normal build), and $LEASEWORK_BREAK
// names one: steal-leases (owners), claim-waiting, cancel-releases and
// keys-listed-reversed (key_order), cancel-finished (terminal), tx-split
// (effects, cancels), tick-per-worker (ticks), snooze-spends (snoozes),
// retry-doubled (retries), pause-ignored (pauses), floors-only (terminal),
// limit-off-by-one, limit-handoff-doubled and limit-ignores-holder-lease
// (limits; the last takes the place of a holder whose lease ran out
// without the holder row's lock, and only the slow renewals catch it),
// partition-off-by-one (partitions: the claim admits one attempt more
// than a partition's room), rate-window-short (rates: the claim counts a
// rate limit's starts over half its period), partition-rate-window-short
// (rates: the same, for a partition's rate limit), fair-no-arrivals
// (terminal: an insert brings no partition to a fair queue, whose claims
// take no row of a partition they do not know), steps-not-handed and
// step-unguarded (steps: a claim hands no steps; a step is recorded
// whatever the row's generation and lease, which the stale steps of a
// worker resumed after a stop show). Such a run passes
// when the history shows the break's properties violated, and prints the
// violations.
//
// # Platforms
//
// The soak needs Linux (signals to processes, /proc to see that a process
// stopped); on other systems this package has no test files, and go test
// reports it so.
package chaos
