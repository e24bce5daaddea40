//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The soak's concurrency limits (lease.Store.SetLimit), declared before
// the workers start, small enough to bind: the four workers have 48
// handler slots that serve the tx kind (8 of the default queue and 4 of
// the bulk queue each), and 16 that serve the bulk queue.
// While the faults are done, the tx kind's limit is lowered to
// txLimitLowered now and then, for a while, and raised again.
const (
	txLimit        = 2
	txLimitLowered = 1
	bulkLimit      = 3
	limitSetter    = "soak" // who sets them, for the limits' audit
)

// The partition limits: the default for every tenant (tenants of them,
// t-0 to t-3, see nextEvents), and t-0's own, lower.
const (
	tenants          = 4
	partitionDefault = 2
	hotTenant        = "t-0"
	hotTenantLimit   = 1
)

// The rate limit: the snoozy kind, whose events start three to five
// attempts each (snoozes, a failure, the success), a quarter of them
// costing snoozyCostly starts, has snoozyRateMax starts in any window of
// snoozyRatePer, across the workers: about what the enqueuer's rate asks
// on average, so that bursts reach it (after a restart, say) and the
// backlog it holds back drains within seconds.
const (
	snoozyRateMax = 12
	snoozyRatePer = 500 * time.Millisecond
	snoozyCostly  = 2
)

// The partition rate limit: tenant t-3 (under the default partition
// limit of live attempts too) has ratedTenantMax starts in any window of
// ratedTenantPer: its rows past that are set aside, and come back when
// the window has room, by a timer, through every fault the others see.
const (
	ratedTenant    = "t-3"
	ratedTenantMax = 2
	ratedTenantPer = 250 * time.Millisecond
)

// The slow renewals: the edge kind has one slot, which the test holds now
// and then with a claim of its own (as a worker whose application_name
// is edgeApp) while events of the kind wait for it. It renews that claim
// edgeEarly before its lease runs out, and the renewal's commit waits
// edgeSlow (a deferred trigger sleeps in it, as a slow commit would, see
// createTables): the lease runs out in the claim's snapshot of every
// claim made meanwhile, but the holder's row is locked by the renewal,
// which then commits. No claim may take the slot meanwhile: the attempt
// holds it under the lease the renewal gave it. Then the test releases
// its claim, and the workers handle the event.
const (
	edgeKind  = "edge"
	edgeLimit = 1
	edgeApp   = "soak-edge"
	edgeLease = 2 * time.Second
	edgeEarly = 400 * time.Millisecond
	edgeSlow  = 1200 * time.Millisecond
	// edgeWaiting is how many events of the kind wait for the slot.
	edgeWaiting = 2
)

// declareLimits declares the soak's limits, and its rate limit.
func (s *soak) declareLimits(ctx context.Context) error {
	for _, l := range []lease.Limit{
		{Scope: lease.ScopeKind, Name: txKind, Max: txLimit},
		{Scope: lease.ScopeQueue, Name: bulkQueue, Max: bulkLimit},
		{Scope: lease.ScopeKind, Name: edgeKind, Max: edgeLimit},
		{Scope: lease.ScopePartition, Name: "", Max: partitionDefault},
		{Scope: lease.ScopePartition, Name: hotTenant, Max: hotTenantLimit},
	} {
		if err := s.setLimit(ctx, l); err != nil {
			return err
		}
	}
	for _, l := range []lease.RateLimit{
		{Scope: lease.ScopeKind, Name: snoozyKind, Max: snoozyRateMax, Per: snoozyRatePer},
		{Scope: lease.ScopePartition, Name: ratedTenant, Max: ratedTenantMax, Per: ratedTenantPer},
	} {
		if err := s.setRateLimit(ctx, l); err != nil {
			return err
		}
	}
	return s.declareFairness(ctx)
}

// The bulk queue is fair across tenants, one of them heavier, and ages
// its priorities: its claims run the statement of fair and aging queues,
// through every fault the others see.
const (
	heavyTenant    = "t-1"
	heavyWeight    = 3
	bulkAgingAfter = 300 * time.Millisecond
)

// declareFairness makes the bulk queue fair and gives it an aging, again
// until each succeeds.
func (s *soak) declareFairness(ctx context.Context) error {
	for _, w := range []lease.Weight{{Queue: bulkQueue, Weight: 1}, {Queue: bulkQueue, Partition: heavyTenant, Weight: heavyWeight}} {
		if err := retry(ctx, "set the weight of "+bulkQueue+" "+w.Partition, func(ctx context.Context) error {
			_, err := s.ops.SetWeight(ctx, w, limitSetter)
			return err
		}); err != nil {
			return err
		}
	}
	return retry(ctx, "set the aging of "+bulkQueue, func(ctx context.Context) error {
		_, err := s.ops.SetAging(ctx, bulkQueue, bulkAgingAfter, limitSetter)
		return err
	})
}

// setRateLimit sets l, again until it succeeds, and records the setting
// for the history, as setLimit does.
func (s *soak) setRateLimit(ctx context.Context, l lease.RateLimit) error {
	set := history.RateLimit{Scope: l.Scope, Name: l.Name, Max: l.Max, Per: l.Per, Invoked: time.Now()}
	err := retry(ctx, "set the rate limit of "+l.Scope+" "+l.Name, func(ctx context.Context) error {
		_, _, err := s.ops.SetRateLimit(ctx, l, limitSetter)
		return err
	})
	if err == nil {
		set.Returned = time.Now()
	}
	s.mu.Lock()
	s.rateLimits = append(s.rateLimits, set)
	s.mu.Unlock()
	s.tracef("rate limit of %s %s set to %d per %v: %v", l.Scope, l.Name, l.Max, l.Per, err)
	return err
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
//
// It raises the limit only once the attempts claimed before the lowering
// have ended (or after raiseBound): the store deletes the slots above a
// lowered limit, held or not, and a raise makes them again, free, so that
// an attempt left outside by the lowering runs beside as many new ones as
// the raised limit admits, more than any limit set (the history showed 3
// live under the limits 2, 1, 2, against SetLimit's "up to the old Max").
// The limits property catches that (TestBadHistories); the soak does not
// provoke it, so that its runs show what else breaks.
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
		s.mu.Lock()
		lowered := s.limits[len(s.limits)-1].Returned
		s.mu.Unlock()
		sleep(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
		if err := poll(ctx, raiseBound, "the attempts of kind "+txKind+" claimed before its limit was lowered to end", func(ctx context.Context) (bool, error) {
			n, err := s.claimedBefore(ctx, txKind, lowered)
			return n == 0, err
		}); err != nil && ctx.Err() != nil {
			return
		}
		if err := s.setLimit(ctx, limit(txLimit)); err != nil {
			s.failf("raising the limit of kind %s: %v", txKind, err)
			return
		}
	}
}

// raiseBound bounds limitLoop's wait before a raise: beyond the lease of
// an attempt whose owner is gone, and the attempt timeout of one whose
// owner renews it.
const raiseBound = 30 * time.Second

// claimedBefore counts the live attempts of kind whose claim wrote (by the
// audit) before at.
func (s *soak) claimedBefore(ctx context.Context, kind string, at time.Time) (int, error) {
	var n int
	err := s.admin.QueryRowContext(ctx, `SELECT count(*) FROM `+s.store.QualifiedTable()+` AS e
		WHERE e.kind = $1 AND e.status = 'INPROGRESS' AND e.lease_until > clock_timestamp()
		  AND EXISTS (SELECT 1 FROM `+auditTable+` AS a
		              WHERE (a.new->>'id')::bigint = e.id AND (a.new->>'generation')::bigint = e.generation
		                AND (a.old->>'generation')::bigint < e.generation AND a.at < $2)`, kind, at).Scan(&n)
	return n, err
}

// slowRenewalLoop makes slow renewals, one after another with a pause
// between, while the faults are done. One that fails (the server
// restarts, say) is left: its claim's lease runs out, and a worker takes
// its event.
func (s *soak) slowRenewalLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 6))
	for {
		select {
		case <-ctx.Done():
			return
		case <-injected:
			return
		case <-time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond):
		}
		s.slowRenewalCounted(ctx)
	}
}

// lastSlowRenewal makes one slow renewal after the last fault, so that a
// run makes one whatever the faults did to the others: it tries again,
// a few times, while the slot is held or a statement fails.
func (s *soak) lastSlowRenewal(ctx context.Context) error {
	var err error
	for try := 1; try <= 5; try++ {
		if err = s.slowRenewalCounted(ctx); err == nil {
			return nil
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("no slow renewal after the last fault was made in 5 tries; the last: %w", err)
}

// slowRenewalCounted makes the next slow renewal, and counts it.
func (s *soak) slowRenewalCounted(ctx context.Context) error {
	s.mu.Lock()
	s.slowTries++
	n := s.slowTries
	s.mu.Unlock()
	err := s.slowRenewal(ctx, n)
	if errors.Is(err, errSlotBusy) && s.trace {
		var holders string
		_ = s.admin.QueryRowContext(ctx, `SELECT string_agg(id || ' ' || event_id || ' ' || COALESCE(worker, '') || ' until ' || lease_until::text
			|| CASE WHEN cancelled_at IS NULL THEN '' ELSE ' cancelled' END, '; ')
			FROM `+s.store.QualifiedTable()+` WHERE kind = $1 AND status = 'INPROGRESS'`, edgeKind).Scan(&holders)
		err = fmt.Errorf("%w: %s", err, holders)
	}
	s.mu.Lock()
	switch {
	case err == nil:
		s.slowRenewals++
	case errors.Is(err, errSlotBusy):
	default:
		s.slowMissed++
	}
	s.mu.Unlock()
	s.tracef("slow renewal %d: %v", n, err)
	return err
}

// errSlotBusy: the slow renewal found the edge kind's slot held.
var errSlotBusy = errors.New("the slot is held")

// slowRenewal makes slow renewal n: it enqueues an event of the edge kind
// and claims it in one transaction (no worker sees it READY), enqueues
// edgeWaiting more, renews the claim edgeEarly before its lease runs out,
// with a commit edgeSlow long, and releases it. It returns errSlotBusy
// when another attempt held the slot, and an error when the renewal was
// refused or a statement failed.
func (s *soak) slowRenewal(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, edgeLease+edgeSlow+10*time.Second)
	defer cancel()
	held := fmt.Sprintf("edge-%d-0", n)
	claim, err := s.enqueueAndClaim(ctx, held)
	switch {
	case err != nil:
		return err
	case claim == nil:
		return errSlotBusy
	}
	var waiting []lease.Event
	var recorded []history.Event
	for i := 1; i <= edgeWaiting; i++ {
		id := fmt.Sprintf("edge-%d-%d", n, i)
		waiting = append(waiting, lease.Event{EventID: id, Kind: edgeKind, MaxAttempts: maxAttempts})
		recorded = append(recorded, history.Event{EventID: id, Kind: edgeKind})
	}
	invoked := time.Now()
	_, err = pgtest.EnqueueCommitted(ctx, s.store, waiting...)
	s.record(history.Enqueue{Invoked: invoked, Returned: time.Now(), Acked: err == nil, Events: recorded})
	if err != nil {
		return err
	}
	if !sleep(ctx, time.Until(claim.LeaseUntil.Add(-edgeEarly))) {
		return ctx.Err()
	}
	if _, err := s.edge.Write(ctx, lease.Renew(claim.Ref(), edgeLease)); err != nil {
		return fmt.Errorf("renew %s: %w", held, err)
	}
	if _, err := s.edge.Write(ctx, lease.Release(claim.Ref())); err != nil {
		return fmt.Errorf("release %s: %w", held, err)
	}
	return nil
}

// enqueueAndClaim enqueues event id of the edge kind, and claims it (or
// another event of the kind waiting) as edgeApp in the same transaction,
// which commits only with a claim: it is rolled back and made again, a
// few times, while the slot is held. Every claim statement of a worker
// that serves the kind locks the slot while it runs (a slot another claim
// has locked counts as held), so a free slot is often found held. It
// returns nil when the slot was held at every try, and records the
// enqueue that committed, or whose commit failed.
func (s *soak) enqueueAndClaim(ctx context.Context, id string) (*leasework.Claim, error) {
	for try := 1; try <= edgeClaimTries; try++ {
		claim, err := s.tryEnqueueAndClaim(ctx, id)
		if err != nil || claim != nil {
			return claim, err
		}
		if !sleep(ctx, edgeClaimGap) {
			return nil, ctx.Err()
		}
	}
	return nil, nil
}

// The tries of enqueueAndClaim, and the pause between two.
const (
	edgeClaimTries = 20
	edgeClaimGap   = 25 * time.Millisecond
)

func (s *soak) tryEnqueueAndClaim(ctx context.Context, id string) (*leasework.Claim, error) {
	tx, err := s.edge.DB().BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	invoked := time.Now()
	if _, err := s.edge.Enqueue(ctx, tx, lease.Event{EventID: id, Kind: edgeKind, MaxAttempts: maxAttempts}); err != nil {
		return nil, err
	}
	claims, err := s.edge.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 1, Lease: edgeLease, Kinds: []string{edgeKind}, Worker: edgeApp})
	if err != nil || len(claims) == 0 {
		return nil, err
	}
	err = tx.Commit()
	s.record(history.Enqueue{Invoked: invoked, Returned: time.Now(), Acked: err == nil,
		Events: []history.Event{{EventID: id, Kind: edgeKind}}})
	if err != nil {
		return nil, err
	}
	return &claims[0], nil
}
