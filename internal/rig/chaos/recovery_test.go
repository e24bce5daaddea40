//go:build linux

package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

const (
	// recoverBound bounds a worker's recovery after a fault, counted from
	// the fault or from the server's return from a restart or failover
	// done meanwhile, whichever is later: a blackholed listener is
	// noticed within about 10s (the drivers' ping), its reconnection
	// backs off from 100ms, and on a loaded machine every step is slow
	// (a server just restarted may refuse connections for a minute).
	recoverBound = 3 * time.Minute
	// sqlBound bounds the retries of one statement of the test's own,
	// which fail while the server restarts.
	sqlBound = 2 * time.Minute
	// pollEvery is how often a condition is polled.
	pollEvery = 20 * time.Millisecond
)

// recovered checks that sl's worker recovered from f by itself, within
// recoverBound: it handles a probe event enqueued now (only it serves the
// probe's kind and queue), and it listens on a connection that started
// after since (any, when since is zero).
func (s *soak) recovered(ctx context.Context, sl *slot, f fault, since time.Time) error {
	start := time.Now()
	s.mu.Lock()
	id := sl.w.id
	s.mu.Unlock()
	// The bound runs from the fault, or from the server's last return.
	deadline := func() time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		from := start
		if s.serverUp.After(from) {
			from = s.serverUp
		}
		return from.Add(recoverBound)
	}
	probe, err := s.enqueueProbe(ctx, sl)
	if err != nil {
		return fmt.Errorf("%s's recovery after %v: %w", id, f, err)
	}
	err = pollUntil(ctx, deadline, fmt.Sprintf("%s to handle probe %s after %v", id, probe, f), func(ctx context.Context) (bool, error) {
		return s.handledBy(ctx, probe, id)
	})
	if err != nil {
		return fmt.Errorf("%w; the end of its output:\n%s", err, s.tailOf(sl))
	}
	err = pollUntil(ctx, deadline, fmt.Sprintf("%s to listen on a connection opened after %v", id, f), func(ctx context.Context) (bool, error) {
		n, err := listeners(ctx, s.admin, id, since)
		return n > 0, err
	})
	if err != nil {
		return fmt.Errorf("%w; the end of its output:\n%s", err, s.tailOf(sl))
	}
	if f != noFault {
		s.mu.Lock()
		s.recovery[f] = max(s.recovery[f], time.Since(start))
		s.mu.Unlock()
	}
	return nil
}

// tailOf returns the end of the output of sl's worker, for a failure report.
func (s *soak) tailOf(sl *slot) string {
	s.mu.Lock()
	w := sl.w
	s.mu.Unlock()
	return w.tail.last(reportBytes)
}

// enqueueProbe enqueues a probe event for sl's worker and returns its event
// id. An enqueue whose commit failed is tried again under a new id; the
// first may exist all the same, and is handled like any other. Each
// enqueue is recorded for the history.
func (s *soak) enqueueProbe(ctx context.Context, sl *slot) (string, error) {
	var eventID string
	err := retry(ctx, "enqueue a probe", func(ctx context.Context) error {
		s.mu.Lock()
		sl.probes++
		eventID = fmt.Sprintf("probe-%d-%d", sl.n, sl.probes)
		s.mu.Unlock()
		e := lease.Event{EventID: eventID, Kind: probeKind(sl.n), Queue: probeQueue(sl.n), MaxAttempts: maxAttempts}
		invoked := time.Now()
		_, err := pgtest.EnqueueCommitted(ctx, s.store, e)
		s.record(history.Enqueue{Invoked: invoked, Returned: time.Now(), Acked: err == nil,
			Events: []history.Event{{EventID: eventID, Kind: e.Kind, Want: history.Done}}})
		return err
	})
	return eventID, err
}

// handledBy reports whether worker id wrote a receipt for eventID.
func (s *soak) handledBy(ctx context.Context, eventID, id string) (bool, error) {
	var ok bool
	err := s.admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+sinkTable+`
		WHERE event_id = $1 AND worker = $2)`, eventID, id).Scan(&ok)
	return ok, err
}

// sleep waits d, and reports false if ctx ended first. It paces the
// schedule; it never stands in for a condition.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// poll calls cond every pollEvery until it reports true. An error from cond
// does not end the wait (the server may be restarting); it is reported if
// bound passes first.
func poll(ctx context.Context, bound time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(bound)
	return pollUntil(ctx, func() time.Time { return deadline }, what, cond)
}

// pollUntil is poll with a deadline that may move: it is read again at
// each try.
func pollUntil(ctx context.Context, deadline func() time.Time, what string, cond func(ctx context.Context) (bool, error)) error {
	start := time.Now()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := cond(cctx)
		cancel()
		switch {
		case err == nil && ok:
			return nil
		case err != nil:
			last = err
		}
		if time.Now().After(deadline()) {
			waited := time.Since(start).Round(time.Millisecond)
			if last != nil {
				return fmt.Errorf("%s: not within %v (last error: %w)", what, waited, last)
			}
			return fmt.Errorf("%s: not within %v", what, waited)
		}
		if !sleep(ctx, pollEvery) {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}

// retry runs f until it succeeds, for at most sqlBound: the test's own
// statements fail while the server restarts.
func retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	return poll(ctx, sqlBound, what, func(ctx context.Context) (bool, error) {
		return true, f(ctx)
	})
}
