package framework

import (
	"context"
	"time"
)

// Listening returns a channel closed once w receives notifications, so that
// tests relying on a wakeup do not race the LISTEN.
func Listening(w *Worker) <-chan struct{} { return w.listening }

// QueuedOutcomes returns how many handler results wait for the outcome
// writer (not counting those in a write in flight).
func QueuedOutcomes(w *Worker) int { return w.outcomes.len() }

// SetSchedulerClock makes w's scheduler read the time from now and wait
// for a time with sleep (which returns early when ctx ends), instead of the
// real clock, so that tests drive firings. Call it before Run.
func SetSchedulerClock(w *Worker, now func() time.Time, sleep func(ctx context.Context, until time.Time)) {
	w.sched.now, w.sched.sleep = now, sleep
}

// OnFiring makes w's scheduler call f after each enqueue of a firing, with
// its event id, whether it was a duplicate, and the enqueue's error. Call
// it before Run.
func OnFiring(w *Worker, f func(eventID string, duplicate bool, err error)) { w.sched.fired = f }

// OnClaimReturned makes w call f after each claim statement returns, with
// its queue, the number of rows claimed and its error. Call it before Run.
func OnClaimReturned(w *Worker, f func(queue string, n int, err error)) { w.claimReturned = f }

// OnSplitWrite makes w call f with the size of each batch of outcomes it
// writes as two statements at once (flushTakingTurns). Call it before Run.
func OnSplitWrite(w *Worker, f func(outcomes int)) { w.splitWrite = f }

// Firings returns the fire times of spec in (from, to], as every worker's
// scheduler computes them: each the next one after the one before.
func Firings(spec string, from, to time.Time) ([]time.Time, error) {
	times, err := parseSchedule(spec)
	if err != nil {
		return nil, err
	}
	var out []time.Time
	for t := times.next(from); !t.IsZero() && !t.After(to); t = times.next(t) {
		out = append(out, t)
	}
	return out, nil
}

// NextFiring returns the first fire time of spec after t, and LatestFiring
// the last in (after, now], as the scheduler computes them.
func NextFiring(spec string, t time.Time) (time.Time, error) {
	times, err := parseSchedule(spec)
	if err != nil {
		return time.Time{}, err
	}
	return times.next(t), nil
}

func LatestFiring(spec string, after, now time.Time) (time.Time, error) {
	times, err := parseSchedule(spec)
	if err != nil {
		return time.Time{}, err
	}
	return times.latest(after, now), nil
}

// SplitFrom is the size from which a batch of outcomes taking turns is
// written as two statements at once.
const SplitFrom = defaultSplitFrom
