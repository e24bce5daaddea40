package framework

import (
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults of [RetryPolicy]; a zero field takes the value here.
const (
	DefaultInitialInterval     = time.Second
	DefaultMultiplier          = 2.0
	DefaultMaxIntervalFactor   = 100 // MaxInterval = 100 × InitialInterval
	DefaultRandomizationFactor = 0.2
)

// Limits of [RetryPolicy] fields. They keep every delay finite and
// representable: no policy within them can make a delay overflow.
const (
	MaxRetryInterval = 30 * 24 * time.Hour // InitialInterval and MaxInterval
	MaxMultiplier    = 100
)

// RetryPolicy decides how long a failed attempt waits before the next one.
// Its zero value is valid: every zero field takes the default documented on
// it. The schedule is computed by github.com/cenkalti/backoff/v4: the delay
// after the n-th failure is InitialInterval × Multiplier^(n-1), capped at
// MaxInterval, then spread by ± RandomizationFactor. A delay is therefore
// never negative and never longer than 2 × [MaxRetryInterval].
//
// The policy counts failures as [leasework.Claim.Failures] does: attempts
// that failed, and attempts whose lease ran out (a crash), never snoozes
// ([leasework.Snooze]). A handler that snoozed n times and then fails
// waits InitialInterval, as after a first failure.
//
// Two budgets bound the attempts, and the lower one wins. The row's own
// max_attempts, set at enqueue, is enforced by the database: every claim
// counts, crashed ones included, a snooze adds one to it, and a retry on
// the last allowed attempt ends the row FAILED. The policy's MaxAttempts
// is a further cap on failures applied by the worker when a handler
// returns an error.
type RetryPolicy struct {
	// InitialInterval is the delay after the first failed attempt. Zero
	// means 1s; at most 30 days ([MaxRetryInterval]); negative is an error.
	InitialInterval time.Duration

	// Multiplier grows the delay after each further failure. Zero means 2;
	// otherwise a finite number between 1 (a constant interval) and 100
	// ([MaxMultiplier]).
	Multiplier float64

	// MaxInterval caps the delay. Zero means 100 × InitialInterval, at
	// most 30 days; otherwise between InitialInterval and 30 days
	// ([MaxRetryInterval]).
	MaxInterval time.Duration

	// RandomizationFactor spreads each delay uniformly over ±factor of
	// itself, so that events failing together do not retry together. Zero
	// means 0.2; negative means none (an exact schedule); at most 1. NaN
	// and infinities are errors.
	RandomizationFactor float64

	// MaxAttempts, when positive, fails an event whose handler returns an
	// error when the event has failed MaxAttempts - 1 times before
	// (Claim.Failures), even if the row's budget allows more: snoozes do
	// not count. Zero leaves the row's budget alone; negative is an error.
	MaxAttempts int
}

// normalize validates p and fills in its defaults. Its errors start with
// the field's name: [Worker.Register] puts its prefix in front.
func (p RetryPolicy) normalize() (RetryPolicy, error) {
	bad := func(field string, v any, want string) (RetryPolicy, error) {
		return p, fmt.Errorf("RetryPolicy.%s is %v; %s", field, v, want)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case p.InitialInterval < 0 || p.InitialInterval > MaxRetryInterval:
		return bad("InitialInterval", p.InitialInterval, fmt.Sprintf("it must be between 0 and %v; zero means %v", MaxRetryInterval, DefaultInitialInterval))
	case p.InitialInterval == 0:
		p.InitialInterval = DefaultInitialInterval
	}
	switch {
	case p.Multiplier == 0:
		p.Multiplier = DefaultMultiplier
	case !finite(p.Multiplier) || p.Multiplier < 1 || p.Multiplier > MaxMultiplier:
		return bad("Multiplier", p.Multiplier, fmt.Sprintf("it must be at least 1 and at most %d, or zero for %v", MaxMultiplier, DefaultMultiplier))
	}
	switch {
	case p.MaxInterval == 0:
		// At most 30 days × 100: no overflow.
		p.MaxInterval = min(DefaultMaxIntervalFactor*p.InitialInterval, MaxRetryInterval)
	case p.MaxInterval < p.InitialInterval || p.MaxInterval > MaxRetryInterval:
		return bad("MaxInterval", p.MaxInterval, fmt.Sprintf("it must be between InitialInterval (%v) and %v, or zero for 100 × InitialInterval", p.InitialInterval, MaxRetryInterval))
	}
	switch {
	case !finite(p.RandomizationFactor):
		return bad("RandomizationFactor", p.RandomizationFactor, "it must be a finite number at most 1; zero means 0.2, negative means none")
	case p.RandomizationFactor == 0:
		p.RandomizationFactor = DefaultRandomizationFactor
	case p.RandomizationFactor < 0:
		p.RandomizationFactor = 0
	case p.RandomizationFactor > 1:
		return bad("RandomizationFactor", p.RandomizationFactor, "it must be at most 1; zero means 0.2, negative means none")
	}
	if p.MaxAttempts < 0 {
		return bad("MaxAttempts", p.MaxAttempts, "it must be positive, or zero to leave the row's budget alone")
	}
	return p, nil
}

// maxScheduleSteps bounds the work of computing one delay: by then any
// sensible schedule has reached MaxInterval.
const maxScheduleSteps = 1000

// delay returns the delay after failure n (1 for the first) under a
// normalized policy: between zero and (1 + RandomizationFactor) ×
// MaxInterval, whatever n. Within the policy's limits the backoff's
// arithmetic cannot overflow: every interval is at most MaxRetryInterval,
// and the spread at most doubles it.
func (p RetryPolicy) delay(failure int) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialInterval,
		RandomizationFactor: p.RandomizationFactor,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		MaxElapsedTime:      0, // never stop: the budgets decide when to stop
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < failure && i < maxScheduleSteps; i++ {
		d = b.NextBackOff()
	}
	return d
}
