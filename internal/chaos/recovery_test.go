//go:build linux

package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

const (
	// recoverBound bounds a worker's recovery after a fault: a blackholed
	// listener is noticed within about 10s (the drivers' ping), its
	// reconnection backs off from 100ms, and on a loaded machine a server
	// just restarted may refuse connections for a minute while it starts.
	recoverBound = 3 * time.Minute
	// sqlBound bounds the retries of one statement of the test's own,
	// which fail while the server restarts.
	sqlBound = 2 * time.Minute
	// pollEvery is how often a condition is polled.
	pollEvery = 20 * time.Millisecond
)

// recovered checks that sl's worker recovered from f by itself, within
// recoverBound: it handles a probe event enqueued now (only it serves the
// probe's kind), and it listens on a connection that started after since
// (any, when since is zero).
func (s *soak) recovered(ctx context.Context, sl *slot, f fault, since time.Time) error {
	start := time.Now()
	s.mu.Lock()
	id := sl.w.id
	s.mu.Unlock()
	probe, err := s.enqueueProbe(ctx, sl)
	if err != nil {
		return err
	}
	err = poll(ctx, recoverBound, fmt.Sprintf("%s to handle probe %s after %v", id, probe, f), func(ctx context.Context) (bool, error) {
		return s.handledBy(ctx, probe, id)
	})
	if err != nil {
		return fmt.Errorf("%w; the end of its output:\n%s", err, s.tailOf(sl))
	}
	err = poll(ctx, recoverBound-time.Since(start), fmt.Sprintf("%s to listen (after %v)", id, f), func(ctx context.Context) (bool, error) {
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
// first may exist all the same, and is handled like any other.
func (s *soak) enqueueProbe(ctx context.Context, sl *slot) (string, error) {
	var eventID string
	err := retry(ctx, "enqueue a probe", func(ctx context.Context) error {
		s.mu.Lock()
		sl.probes++
		eventID = fmt.Sprintf("probe-%d-%d", sl.n, sl.probes)
		s.mu.Unlock()
		_, err := pgtest.EnqueueCommitted(ctx, s.store, lease.Event{EventID: eventID, Kind: probeKind(sl.n), MaxAttempts: maxAttempts})
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
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %v (last error: %w)", what, bound, last)
			}
			return fmt.Errorf("%s: not within %v", what, bound)
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
