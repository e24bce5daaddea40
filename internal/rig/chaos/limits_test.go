//go:build linux

package chaos

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/lease"
)

// The soak's concurrency limits (lease.Store.SetLimit), declared before
// the workers start, small enough to bind: the four workers have 32
// handler slots that serve the tx kind, and 16 that serve the bulk queue.
// While the faults are done, the tx kind's limit is lowered to
// txLimitLowered now and then, for a while, and raised again.
const (
	txLimit        = 2
	txLimitLowered = 1
	bulkLimit      = 3
	limitSetter    = "soak" // who sets them, for the limits' audit
)

// declareLimits declares the soak's limits.
func (s *soak) declareLimits(ctx context.Context) error {
	for _, l := range []lease.Limit{
		{Scope: lease.ScopeKind, Name: txKind, Max: txLimit},
		{Scope: lease.ScopeQueue, Name: bulkQueue, Max: bulkLimit},
	} {
		if err := s.setLimit(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// setLimit sets l, again until it succeeds, and records the setting for
// the history: from the first call to the return of the one that
// succeeded (never, if none did: it may have committed or not).
func (s *soak) setLimit(ctx context.Context, l lease.Limit) error {
	set := history.Limit{Scope: l.Scope, Name: l.Name, Max: l.Max, Invoked: time.Now()}
	err := retry(ctx, "set the limit of "+l.Scope+" "+l.Name, func(ctx context.Context) error {
		_, err := s.ops.SetLimit(ctx, l, limitSetter)
		return err
	})
	if err == nil {
		set.Returned = time.Now()
	}
	s.mu.Lock()
	s.limits = append(s.limits, set)
	s.mu.Unlock()
	s.tracef("limit of %s %s set to %d: %v", l.Scope, l.Name, l.Max, err)
	return err
}

// limitLoop lowers the tx kind's limit for a while, raises it again, and
// again, while the faults are done. It returns with the limit raised.
func (s *soak) limitLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 5))
	limit := func(n int) lease.Limit { return lease.Limit{Scope: lease.ScopeKind, Name: txKind, Max: n} }
	for {
		select {
		case <-ctx.Done():
			return
		case <-injected:
			return
		case <-time.After(time.Duration(1500+rng.IntN(2500)) * time.Millisecond):
		}
		if err := s.setLimit(ctx, limit(txLimitLowered)); err != nil {
			s.failf("lowering the limit of kind %s: %v", txKind, err)
			return
		}
		sleep(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
		if err := s.setLimit(ctx, limit(txLimit)); err != nil {
			s.failf("raising the limit of kind %s: %v", txKind, err)
			return
		}
	}
}
