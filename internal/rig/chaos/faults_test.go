//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// fault is a kind of fault the injector does.
type fault int

const (
	faultKill      fault = iota // SIGKILL a worker, start a replacement
	faultStop                   // SIGSTOP a worker past its lease, SIGCONT it once another worker re-claimed
	faultTerminate              // pg_terminate_backend of a worker's backends, its LISTEN connection included
	faultBlackhole              // the worker's proxy stops forwarding on its open connections
	faultRestart                // fast shutdown of the server, and start again
	faultFailover               // the primary crashes, its standby is promoted, the old primary rejoins as the standby (the long run's)
	numFaults

	noFault fault = -1 // a worker's start, checked like a recovery
)

var faultNames = [numFaults]string{"kill", "stop", "terminate", "blackhole", "restart", "failover"}

func (f fault) String() string {
	if f < 0 || f >= numFaults {
		return "start"
	}
	return faultNames[f]
}

// Bounds of the injector's waits; reaching one fails the soak.
const (
	// slotBound bounds the wait for a worker free of other faults: above
	// a recovery's own bound (recoverBound, counted from the server's
	// return).
	slotBound = 5 * time.Minute
	// preferBound bounds the wait for a worker fit for a stop (one holding
	// claims); after it, any free worker does.
	preferBound = 5 * time.Second
	// reclaimBound bounds the wait, while a worker is stopped, for another
	// worker to claim one of its rows again; after it, it is resumed all
	// the same (the soak counts such stops).
	reclaimBound = 20 * time.Second
	// processBound bounds the wait for a signalled process to stop or exit.
	processBound = 30 * time.Second
	// serverBound bounds a restart or a failover of the server: shutdown,
	// start-up (pgserver waits up to 3 minutes for it), promotion, a base
	// backup.
	serverBound = 5 * time.Minute
)

// schedule returns the soak's faults in order: counts[f] of each kind f,
// in rounds that each hold once every kind not yet done as often as asked,
// shuffled by rng.
func schedule(rng *rand.Rand, counts [numFaults]int) []fault {
	var out []fault
	for round := 0; ; round++ {
		var kinds []fault
		for f, n := range counts {
			if round < n {
				kinds = append(kinds, fault(f))
			}
		}
		if len(kinds) == 0 {
			return out
		}
		for _, p := range rng.Perm(len(kinds)) {
			out = append(out, kinds[p])
		}
	}
}

// counts returns how many faults of each kind the run does.
func (c soakConfig) counts() [numFaults]int {
	var out [numFaults]int
	for f := range out {
		out[f] = c.perKind
	}
	out[faultFailover] = c.failovers
	return out
}

// inject does the soak's faults, on a schedule drawn from the seed: each
// after a gap of 0.25 to 1.75 mean gaps, on a worker chosen by the seed
// among those free of other faults. A fault's recovery is checked in the
// background, so faults overlap on different workers. A terminate that hit
// no LISTEN connection (the worker was connecting its listener again) does
// not count and is done again after the schedule. It returns once every
// fault is done and its recovery checked, or the soak failed.
func (s *soak) inject(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.seed, 1))
	i := 0
	for queue := schedule(rng, s.cfg.counts()); len(queue) > 0 && ctx.Err() == nil; queue = s.takeRedo() {
		var wg sync.WaitGroup
		for _, f := range queue {
			if !s.injectOne(ctx, &wg, rng, i, f) {
				break
			}
			i++
		}
		wg.Wait()
	}
}

// injectOne does fault i, of kind f, after its gap; the worker's recovery
// is checked in wg. It reports false if the run ended.
func (s *soak) injectOne(ctx context.Context, wg *sync.WaitGroup, rng *rand.Rand, i int, f fault) bool {
	gap := time.Duration(float64(s.cfg.meanGap) * (0.25 + 1.5*rng.Float64()))
	pick := rng.Uint64()
	if !sleep(ctx, gap) {
		return false
	}
	if f == faultRestart || f == faultFailover {
		// Restarts and failovers are done here, one at a time; the
		// workers' recovery is checked meanwhile, beside later faults.
		start := time.Now()
		do := s.restart
		if f == faultFailover {
			do = s.failover
		}
		window := s.addFault(f, "")
		checks, err := do(ctx)
		if err != nil {
			s.failf("fault %d (%v): %v", i, f, err)
			return false
		}
		wg.Go(func() {
			var cw sync.WaitGroup
			for _, check := range checks {
				cw.Go(func() {
					if err := check(); err != nil {
						s.failf("fault %d (%v): %v", i, f, err)
					}
				})
			}
			cw.Wait()
			s.endFault(window)
			s.tracef("fault %d: %v, done and every worker recovered in %v", i, f, time.Since(start).Round(time.Millisecond))
		})
		return true
	}
	sl, err := s.acquire(ctx, f, pick)
	if err != nil {
		s.failf("fault %d (%v): %v", i, f, err)
		return false
	}
	wg.Go(func() {
		defer s.release(sl)
		start := time.Now()
		if err := s.workerFault(ctx, f, sl); err != nil {
			s.failf("fault %d (%v on slot %d): %v", i, f, sl.n, err)
		}
		s.tracef("fault %d: %v on slot %d, done and recovered in %v", i, f, sl.n, time.Since(start).Round(time.Millisecond))
	})
	return true
}

// takeRedo returns the faults to do again, and forgets them.
func (s *soak) takeRedo() []fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	redo := s.redo
	s.redo = nil
	return redo
}

// acquire waits until some worker is free (of other faults, and of a
// restart's pending check), then marks one busy and returns it: chosen by
// pick among the free workers fit for f (see fit); for a stop, once
// preferBound has passed, among all free workers.
func (s *soak) acquire(ctx context.Context, f fault, pick uint64) (*slot, error) {
	start := time.Now()
	var sl *slot
	err := poll(ctx, slotBound, "a worker free of other faults", func(ctx context.Context) (bool, error) {
		s.mu.Lock()
		var free []*slot
		for _, c := range s.slots {
			if !c.busy && c.pending == 0 {
				free = append(free, c)
			}
		}
		s.mu.Unlock()
		if f == faultBlackhole || f == faultTerminate || time.Since(start) < preferBound {
			var fit []*slot
			for _, c := range free {
				if ok, err := s.fit(ctx, f, c); err != nil {
					return false, err
				} else if ok {
					fit = append(fit, c)
				}
			}
			free = fit
		}
		if len(free) == 0 {
			return false, nil
		}
		c := free[pick%uint64(len(free))]
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.busy || c.pending > 0 {
			return false, nil
		}
		c.busy = true
		sl = c
		return true, nil
	})
	return sl, err
}

// fit reports whether sl's worker suits f now: a stop wants a worker that
// holds claims (else nothing is re-claimed while it is stopped); a
// terminate and a blackhole one that listens, on a connection opened since
// its last blackhole: a terminate must hit it, and a blackhole must not
// race with its reconnection (a connection opened between the clock's
// reading and the blackhole would be silenced, yet taken for the new
// listener of its recovery).
func (s *soak) fit(ctx context.Context, f fault, sl *slot) (bool, error) {
	s.mu.Lock()
	id, silenced := sl.w.id, sl.silencedAt
	s.mu.Unlock()
	switch f {
	case faultStop:
		n, err := s.held(ctx, id)
		return n > 0, err
	case faultTerminate, faultBlackhole:
		n, err := listeners(ctx, s.admin, id, silenced)
		return n > 0, err
	}
	return true, nil
}

// held counts the rows id holds with a running lease.
func (s *soak) held(ctx context.Context, id string) (int, error) {
	var n int
	err := s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+s.store.QualifiedTable()+`
		WHERE worker = $1 AND status = 'INPROGRESS' AND lease_until > clock_timestamp()`, id).Scan(&n)
	return n, err
}

func (s *soak) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl.busy = false
}

// count records one fault done.
func (s *soak) count(f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[f]++
}

// addFault records the start of fault f, done to worker (every worker,
// if empty), for the history, and returns its index.
func (s *soak) addFault(f fault, worker string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultWindows = append(s.faultWindows, history.Fault{Kind: f.String(), Worker: worker, Start: time.Now()})
	return len(s.faultWindows) - 1
}

// endFault records that the recovery from fault i was checked.
func (s *soak) endFault(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultWindows[i].End = time.Now()
}

// workerFault does f to sl's worker and checks that it recovers.
func (s *soak) workerFault(ctx context.Context, f fault, sl *slot) error {
	s.mu.Lock()
	w := sl.w
	s.mu.Unlock()
	defer s.endFault(s.addFault(f, w.id))
	var since time.Time // its listener must be newer than this
	switch f {
	case faultKill:
		if err := w.kill(processBound); err != nil {
			return err
		}
		s.count(f)
		if _, err := s.startWorker(sl); err != nil {
			return err
		}
	case faultStop:
		if err := s.stop(ctx, w); err != nil {
			return err
		}
	case faultTerminate:
		if err := retry(ctx, "read the clock", func(ctx context.Context) (err error) {
			since, err = dbNow(ctx, s.admin)
			return err
		}); err != nil {
			return err
		}
		s.mu.Lock()
		silenced := sl.silencedAt
		s.mu.Unlock()
		var ended []backend
		err := retry(ctx, "terminate "+w.id+"'s backends", func(ctx context.Context) (err error) {
			ended, err = terminate(ctx, s.admin, w.id)
			return err
		})
		if err != nil {
			return err
		}
		// Its listener is the LISTEN connection opened since its last
		// blackhole: an older one is a silenced connection's backend,
		// whose client has gone.
		hit := slices.ContainsFunc(ended, func(b backend) bool { return b.listener && b.started.After(silenced) })
		if hit {
			s.count(f)
		} else {
			s.mu.Lock()
			s.terminateMisses++
			s.redo = append(s.redo, f)
			s.mu.Unlock()
			s.tracef("terminated %d backends of %s, none of them its LISTEN connection (one started after %s, its last blackhole): %v; the end of its output:\n%s",
				len(ended), w.id, silenced.Format("15:04:05.000000"), ended, w.tail.last(reportBytes))
		}
	case faultBlackhole:
		if err := retry(ctx, "read the clock", func(ctx context.Context) (err error) {
			since, err = dbNow(ctx, s.admin)
			return err
		}); err != nil {
			return err
		}
		if n := sl.proxy.Blackhole(); n == 0 {
			return fmt.Errorf("blackholed no connection of %s", w.id)
		}
		s.mu.Lock()
		sl.silencedAt = since
		s.mu.Unlock()
		s.count(f)
	}
	return s.recovered(ctx, sl, f, since)
}

// stop stops w (SIGSTOP) while it holds claims, expires its leases with the
// fixture, waits until another worker claimed one of its rows again, and
// resumes it (SIGCONT): its renewals and outcome writes for those rows are
// now a stale owner's, which the database must refuse. When w held nothing
// by the time it stopped, it is resumed and stopped again once it holds
// claims, a few times.
func (s *soak) stop(ctx context.Context, w *worker) error {
	var rows []int64
	for try := 1; ; try++ {
		if err := w.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		if err := poll(ctx, processBound, w.id+" stopped", func(context.Context) (bool, error) {
			return w.stopped()
		}); err != nil {
			return err
		}
		if err := retry(ctx, "expire "+w.id+"'s leases", func(ctx context.Context) error {
			return expireLeases(ctx, s.store, w.id)
		}); err != nil {
			return err
		}
		if err := retry(ctx, "read "+w.id+"'s expired rows", func(ctx context.Context) (err error) {
			rows, err = s.expired(ctx, w.id)
			return err
		}); err != nil {
			return err
		}
		if len(rows) > 0 || try == 5 {
			break
		}
		if err := w.signal(syscall.SIGCONT); err != nil {
			return err
		}
		_ = poll(ctx, preferBound, w.id+" holding claims", func(ctx context.Context) (bool, error) {
			n, err := s.held(ctx, w.id)
			return n > 0, err
		})
	}
	s.count(faultStop)
	err := poll(ctx, reclaimBound, "another worker claiming a row of stopped "+w.id, func(ctx context.Context) (bool, error) {
		if len(rows) == 0 {
			return true, nil
		}
		var n int
		err := s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+s.store.QualifiedTable()+`
			WHERE id = ANY ($1) AND worker IS DISTINCT FROM $2`, rows, w.id).Scan(&n)
		return n > 0, err
	})
	s.mu.Lock()
	switch {
	case len(rows) == 0:
		s.stopsIdle++
	case err == nil:
		s.stopsReclaimed++
	}
	s.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		return err
	}
	return w.signal(syscall.SIGCONT)
}

// expired returns the rows id holds whose lease has expired.
func (s *soak) expired(ctx context.Context, id string) ([]int64, error) {
	return queryInts(ctx, s.admin, `SELECT id FROM `+s.store.QualifiedTable()+`
		WHERE worker = $1 AND status = 'INPROGRESS' AND lease_until <= clock_timestamp()`, id)
}

// restart restarts the server (fast shutdown) and returns once it is back,
// with the checks that each worker recovered.
func (s *soak) restart(ctx context.Context) ([]func() error, error) {
	var since time.Time
	if err := retry(ctx, "read the clock", func(ctx context.Context) (err error) {
		since, err = dbNow(ctx, s.admin)
		return err
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	primary := s.primary
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, serverBound)
	err := primary.Restart(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("restart the server: %w", err)
	}
	s.count(faultRestart)
	return s.serverBack(ctx, faultRestart, since), nil
}

// failover crashes the primary, promotes its synchronous standby, points
// every proxy at it, and makes the old primary its standby again; it
// returns once the new primary accepts writes and has a synchronous
// standby, with the checks that each worker recovered. No acknowledged
// commit is lost: every commit waited for the standby.
func (s *soak) failover(ctx context.Context) ([]func() error, error) {
	var since time.Time
	if err := retry(ctx, "read the clock", func(ctx context.Context) (err error) {
		since, err = dbNow(ctx, s.admin)
		return err
	}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	old, next := s.primary, s.standby
	s.mu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, serverBound)
	defer cancel()
	if err := old.Crash(); err != nil {
		return nil, fmt.Errorf("failover: crash the primary: %w", err)
	}
	if err := next.Promote(fctx); err != nil {
		return nil, fmt.Errorf("failover: promote the standby: %w", err)
	}
	// No standby follows the new primary yet: its commits must not wait
	// for one.
	if err := next.RequireSyncStandby(fctx, ""); err != nil {
		return nil, fmt.Errorf("failover: make the new primary's commits asynchronous until its standby streams: %w", err)
	}
	for _, p := range s.proxies() {
		if err := p.Retarget(next.DSN()); err != nil {
			return nil, fmt.Errorf("failover: point the proxies at the new primary: %w", err)
		}
	}
	s.mu.Lock()
	s.primary, s.standby = next, nil
	s.mu.Unlock()
	s.count(faultFailover)
	if err := old.Rejoin(fctx, next, serverOptions()); err != nil {
		return nil, fmt.Errorf("failover: the old primary rejoins as the new one's standby: %w", err)
	}
	if err := next.RequireSyncStandby(fctx, "*"); err != nil {
		return nil, fmt.Errorf("failover: make the new standby synchronous: %w", err)
	}
	s.mu.Lock()
	s.standby = old
	s.mu.Unlock()
	return s.serverBack(ctx, faultFailover, since), nil
}

// proxies returns every proxy: the test's and each worker's.
func (s *soak) proxies() []*pgtest.Proxy {
	var out []*pgtest.Proxy
	if s.front != nil {
		out = append(out, s.front)
	}
	for _, sl := range s.slots {
		out = append(out, sl.proxy)
	}
	return out
}

// serverBack notes that the server is back after f, and returns the
// checks that each worker recovered from it. The workers free of other
// faults are taken at once, before any new fault can be; a worker busy
// with another fault is checked once that fault is done.
func (s *soak) serverBack(ctx context.Context, f fault, since time.Time) []func() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serverUp = time.Now()
	var checks []func() error
	for _, sl := range s.slots {
		taken := !sl.busy
		if taken {
			sl.busy = true
		} else {
			sl.pending++ // no new fault takes it before this check
		}
		checks = append(checks, func() error {
			if !taken {
				if err := s.take(ctx, sl); err != nil {
					return err
				}
			}
			defer s.release(sl)
			return s.recovered(ctx, sl, f, since)
		})
	}
	return checks
}

// take waits until sl is free, for a restart's pending check, and marks it
// busy.
func (s *soak) take(ctx context.Context, sl *slot) error {
	return poll(ctx, slotBound, fmt.Sprintf("worker slot %d free of other faults", sl.n), func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sl.busy {
			return false, nil
		}
		sl.busy = true
		sl.pending--
		return true, nil
	})
}
