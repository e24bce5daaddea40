// Package chaos holds the chaos soak: a test, bounded in faults and in
// time, that runs events through several worker processes while a fault
// injector kills, pauses, disconnects and silences them and restarts the
// PostgreSQL server under them, then checks from the database that nothing
// was lost and no stale owner's write was accepted.
//
// The package has no code of its own: everything is in its tests.
//
//	go test -race -run Soak -v ./internal/chaos/                             # the short run, as CI runs it
//	LEASEWORK_SOAK=long go test -run Soak -v -timeout 60m ./internal/chaos/  # at least 250 faults of each kind
//	LEASEWORK_SOAK_SEED=123 go test -run Soak -v ./internal/chaos/           # replay a run's schedule
//	LEASEWORK_SOAK_TRACE=1 go test -run Soak -v ./internal/chaos/            # log every fault as it is done
//
// The seed fixes the schedule: the order of the faults, the gaps between
// them and the choice of worker among those free. The timing of what the
// workers and the server do in between is the machine's, so a replay
// repeats the faults, not every interleaving.
//
// # What runs
//
// The test starts a throwaway cluster of its own (it restarts it, so it
// never uses the server named by $LEASEWORK_DSN) and four worker processes:
// the test binary run again, drivers pgx and pq alternating, each through a
// loopback proxy of its own, with its worker id as application_name. Each
// handler writes a receipt (event id, generation, worker) into a sink
// table in a statement of its own, the stand-in for an external system;
// some events ask to fail (leasework.Permanent) and some fail once, to be
// retried. An enqueuer in the test keeps adding events throughout and
// records which commits were acknowledged.
//
// # The faults
//
// On a schedule drawn from a seed (math/rand/v2's PCG; the seed is printed
// at the start and in every failure), each of these happens the same number
// of times, overlapping on different workers:
//
//   - kill: SIGKILL a worker and start a replacement;
//   - stop: SIGSTOP a worker holding claims, expire its leases with the
//     fixture (never a wait), wait until another worker claimed one of its
//     rows again, then SIGCONT it: its late writes must be refused;
//   - terminate: pg_terminate_backend of every backend of one worker, its
//     LISTEN connection included (a terminate that found the listener
//     connecting again, and so hit none, is not counted and is done again);
//   - blackhole: the worker's proxy stops forwarding on every open
//     connection without closing it;
//   - restart: fast shutdown of the server, and start again.
//
// After each fault the worker concerned (every worker, after a restart)
// must recover by itself within a bound: it handles a probe event of a kind
// only it serves, and it listens again on a connection opened after the
// fault.
//
// # What is checked at the end
//
// Every event is finished, and FAILED exactly when its payload asked; no
// acknowledged event is missing (lost); every DONE event has a receipt,
// and one from its final claim. An AFTER UPDATE trigger records every
// accepted claim, renewal and outcome write with the row's claimant and the
// writing session's application_name: no outcome or renewal was accepted
// from a session other than the row's current claimant, nor after its
// lease's end, nor changing its generation, and each row's final state was
// written at its final generation by its final claimant. After the last
// fault each worker picks up a probe well within PollInterval (10s), by
// NOTIFY: two probes in a row, the second of which no poll could have
// found. Every worker process stops with status 0 on SIGTERM within a
// bound, and none exited by itself. The run ends with one line:
//
//	soak: seed=… events=… kill=… stop=… terminate=… blackhole=… restart=… duplicates=… stale_rejected=… stale_accepted=0 lost=0 pickup_after_restart=…
//
// # Platforms
//
// The soak needs Linux (signals to processes, /proc to see that a process
// stopped); on other systems this package has no test files, and go test
// reports it so.
package chaos
