package framework

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// dispatch is the claim loop. It claims as many rows as there are free
// handler slots, in one statement. After a full batch it claims again as
// soon as a slot frees; after a short one it waits for a notification, the
// poll interval, or, after a claim that found nothing and when that comes
// first, the moment a row becomes claimable by itself: the earliest
// running lease expires or the earliest waiting retry comes due (see
// untilNextWake). So it never polls faster than Config.PollInterval unless
// woken, a lease it can see runs out, or a row it can see comes due.
//
// After a failed claim it tries again after a backoff (claimRetryFirst,
// doubling up to the poll interval) or when woken. A claim fails most
// often because the database went away: a restart, a failover. Events
// enqueued meanwhile sent their notifications to nobody, and a worker
// that waited for the next poll would leave them waiting that long.
func (w *Worker) dispatch(ctx context.Context, q *queue) {
	swept := goDone(func() { w.sweep(ctx, q) })
	defer func() { <-swept }()
	defer q.drained.Store(false) // no claims now: no turns taken either
	poll := time.NewTimer(0)
	defer poll.Stop()
	retry := &backoff.ExponentialBackOff{
		InitialInterval: claimRetryFirst, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: w.cfg.PollInterval, Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	retry.Reset()
	more := true // claim at once on start
	for ctx.Err() == nil {
		if !more {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
			case <-poll.C:
			}
		}
		free := w.loopSlots(q)
		for free == 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.slotFreed:
			}
			free = w.loopSlots(q)
		}
		n, err := w.claim(q, free, false)
		w.mu.Lock()
		q.loopClaim = 0
		w.mu.Unlock()
		more = err == nil && n == free
		// A claim that found fewer rows than it could take leaves none
		// due behind it: the queue's completions may take the turns they
		// pass on (writeTakingTurns) until a claim comes back full or fails.
		q.drained.Store(err == nil && n < free)
		wait := w.pollWait()
		switch {
		case err != nil:
			wait = min(wait, retry.NextBackOff())
		case n == 0:
			retry.Reset()
			wait = w.untilNextWake(q, wait)
		default:
			retry.Reset()
		}
		poll.Reset(wait)
	}
}

// claimRetryFirst is the first wait after a failed claim; see dispatch.
const claimRetryFirst = 50 * time.Millisecond

// Bounds of a wait shortened to the next wake.
const (
	wakeSlack   = 10 * time.Millisecond // after the moment: the claim compares with the database clock
	minWakeWait = 50 * time.Millisecond // even when a lease looks expired or a row due already
)

// untilNextWake shortens wait, the time to the next poll of an idle
// worker, to the moment a row of q becomes claimable by itself, when that
// comes first: the earliest running lease runs out, the earliest READY
// row not yet due comes due, or a rate limit holding a due row back has
// room for it again (lease.Store.NextWakeFrom). A crashed worker's claims
// are then taken over as their leases expire, a retry runs when its delay
// ends, and a rate-limited row when its window allows, instead of at the
// next poll: none of them sends a notification. Only an idle worker asks (a claim that found nothing), so
// a busy one adds no round trip. On an error it keeps wait.
//
// It reads the leases from the earliest running one it found last time
// (lease.Store.NextWakeFrom), not from now: the rows claimed and finished
// in the last lease period each leave an entry there, which vacuum cannot
// remove while the xmin horizon is pinned. A lease granted since that runs
// out before it (another worker's shorter Config.Lease) is found by the
// claim at the next poll.
func (w *Worker) untilNextWake(q *queue, wait time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(w.dbCtx, w.cfg.statementTimeout())
	defer cancel()
	d, ok, earliest, err := w.store.NextWakeFrom(ctx, q.name, q.wakeFrom)
	q.wakeFrom = earliest
	if err != nil {
		w.log.Debug("reading the next wake failed; polling meanwhile", "err", err)
		return wait
	}
	if ok {
		return min(wait, max(d+wakeSlack, minWakeWait))
	}
	return wait
}

// sweepTick is how often a queue's sweep looks whether one is due.
const sweepTick = fullEvery / 4

// sweep runs q's claims from the oldest beside its claim loop, when they
// are due (see floors), on a share of the free slots reserved for it, so
// that the loop's floored claims go on while a sweep walks what vacuum
// cannot remove. It returns when ctx ends, after the sweep in flight.
func (w *Worker) sweep(ctx context.Context, q *queue) {
	tick := time.NewTicker(sweepTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !q.floors.sweepDue(time.Now()) {
			continue
		}
		limit := w.reserveSweepSlots(q, max(1, q.concurrency/sweepShare))
		if limit == 0 {
			q.floors.sweepSkipped()
			continue
		}
		n, _ := w.claim(q, limit, true)
		w.unreserveSlots(q, limit-n)
	}
}

// claim claims up to limit rows of q and starts their handlers: from the
// queue's floors, or, for a sweep, from the oldest.
func (w *Worker) claim(q *queue, limit int, sweep bool) (int, error) {
	// None begins once the worker stops (a loop may wake as the stop
	// comes: select picks either). One in flight is allowed to finish, and
	// Run waits for it before it releases anything, so that its rows are
	// started and released with the others rather than left to wait out
	// their lease.
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return 0, nil
	}
	w.claiming.Add(1)
	w.mu.Unlock()
	defer w.claiming.Done()
	ctx, cancel := context.WithTimeout(w.dbCtx, w.cfg.statementTimeout())
	defer cancel()
	w.count.claimQueries.Add(1)
	sent := time.Now() // before the statement: the lease cannot start earlier
	from, leaseFrom, full := q.floors.next()
	if breakFloors(&q.floors, sweep) {
		from, leaseFrom, full = nil, time.Time{}, true
	}
	claims, heldBack, err := w.store.ClaimHeldBack(ctx, lease.ClaimRequest{
		Limit:       limit,
		Lease:       w.cfg.Lease,
		Kinds:       w.kindList,
		Worker:      w.cfg.WorkerID,
		Queue:       q.name,
		DueFrom:     from,
		ExpiredFrom: leaseFrom,
	})
	q.floors.claimed(claims, heldBack, err, full, limit, w.cfg.Lease, time.Since(sent), time.Now())
	if f := w.claimReturned; f != nil {
		f(q.name, len(claims), err)
	}
	if err != nil {
		w.count.claimErrors.Add(1)
		w.log.Warn("claim failed", "queue", q.name, "err", err)
		return 0, err
	}
	if len(claims) > 0 {
		q.limited.Store(heldBack)
	}
	if heldBack {
		w.count.claimsHeldBack.Add(1)
	}
	returned := time.Now()
	var dropped []int64
	for _, c := range claims {
		if !w.startAttempt(q, c, sent, returned, sweep) {
			dropped = append(dropped, c.ID)
		}
	}
	if len(dropped) > 0 {
		// The stop's time ran out while the claim was in flight.
		w.log.Warn("claimed as the worker stopped; the claims are left to expire", "ids", dropped)
	}
	return len(claims), nil
}

// loopSlots is how many rows the claim loop's next claim may take
// (freeSlotsLocked), which it records as in flight (queue.loopClaim) until
// the claim's rows have started: a sweep does not reserve them meanwhile
// (reserveSweepSlots).
func (w *Worker) loopSlots(q *queue) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	q.loopClaim = w.freeSlotsLocked(q)
	return q.loopClaim
}

// reserveSweepSlots is reserveSlots for a sweep: from the free slots that
// the claim loop's claim in flight may not fill. Without it, a sweep
// reserving while the loop's claim was in flight took the slots that claim
// was about to fill, and the worker held a sweep's share more than twice
// Concurrency, running as many handlers more than Concurrency.
func (w *Worker) reserveSweepSlots(q *queue, n int) int { return w.reserve(q, n, true) }

// freeSlotsLocked is how many rows the next claim may take: the handler
// slots free, but never so many that the claims held (running, or
// finished and waiting for their outcome to be written) pass twice
// Concurrency. A handler's slot frees when it returns, so that claiming
// overlaps the writing of outcomes; when outcomes are written slowly (a
// slow or struggling database), claims wait for them instead of piling up
// unbounded, each to be renewed. Under w.mu.
func (w *Worker) freeSlotsLocked(q *queue) int {
	return max(min(q.concurrency-q.running, 2*q.concurrency-q.held), 0)
}

// reserveSlots takes up to n of q's free slots for claims made outside the
// claim loop (a sweep's), counted as running handlers, and returns how
// many: each claim then starts in one of them (startAttempt with
// reserved), and unreserveSlots gives back those no claim took.
// writeTakingTurns does the same for the turns it takes.
func (w *Worker) reserveSlots(q *queue, n int) int { return w.reserve(q, n, false) }

// reserve takes up to n of q's free slots, counted as running handlers,
// and returns how many; for a sweep, only from those the claim loop's
// claim in flight may not fill.
func (w *Worker) reserve(q *queue, n int, sweep bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	free := w.freeSlotsLocked(q)
	if sweep {
		free -= q.loopClaim
	}
	n = max(min(n, free), 0)
	q.running += n
	q.held += n
	return n
}

// unreserveSlots gives back n slots reserved by reserveSlots that no claim
// took, and tells the claim loop that slots may be free and a stop that
// handlers may be done: reserved slots count as running handlers, which
// a stop waits for.
func (w *Worker) unreserveSlots(q *queue, n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	q.running -= n
	q.held -= n
	w.mu.Unlock()
	signal(q.slotFreed)
	signal(w.handlerReturned)
}

// pollWait is the poll interval plus a jitter of up to a fifth of it, so
// that idle workers started together drift apart.
func (w *Worker) pollWait() time.Duration {
	d := w.cfg.PollInterval
	return jittered(d, rand.N(d/5+1))
}

// jittered adds jitter j (between 0 and d/5) to a poll interval d of at
// most MaxPollInterval: the sum cannot overflow.
func jittered(d, j time.Duration) time.Duration { return d + j }

// listen turns LISTEN/NOTIFY notifications into wakeups of the claim loop,
// when the driver can listen. A notification for a kind this worker does
// not handle is ignored. On a lost connection it listens again after a
// backoff, waking the claim loop in case a notification was missed.
func (w *Worker) listen(ctx context.Context) {
	n, ok := w.store.Driver().(leasework.Notifier)
	if !ok {
		w.log.Info("driver cannot listen for notifications; polling only", "driver", w.store.Driver().Name())
		return
	}
	wait := &backoff.ExponentialBackOff{
		InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: time.Minute, Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	wait.Reset()
	for ctx.Err() == nil {
		l, err := n.Listen(ctx, w.store.DB(), w.store.Channel())
		if errors.Is(err, errors.ErrUnsupported) {
			// The driver can never listen on this pool: say so once and
			// poll, instead of warning on every retry.
			w.log.Info("driver cannot listen for notifications on this pool; polling only",
				"driver", w.store.Driver().Name(), "err", err)
			return
		}
		if err == nil {
			wait.Reset()
			w.listenOnce.Do(func() { close(w.listening) })
			w.wakeAll() // anything inserted before LISTEN took effect
			err = w.receive(ctx, l)
			_ = l.Close()
		}
		if ctx.Err() != nil {
			return
		}
		d := wait.NextBackOff()
		w.log.Warn("not listening for notifications; polling meanwhile", "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (w *Worker) receive(ctx context.Context, l leasework.Listener) error {
	for {
		kind, err := l.Wait(ctx)
		if err != nil {
			return err
		}
		// An empty payload means "maybe missed some" (or a queue
		// resumed): wake anyway. A notification names a kind, not a
		// queue: every queue looks.
		if _, mine := w.kinds[kind]; mine || kind == "" {
			w.wakeAll()
		}
	}
}
