//go:build linux

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/history"
)

// check checks the run's history and the workers' own figures, and prints
// the soak's lines: its figures, then, last, the history's verdict.
func (s *soak) check(ctx context.Context, pickup, faulted, total time.Duration) {
	t := s.t
	fail := func(format string, args ...any) {
		t.Errorf("soak seed=%d: "+format, append([]any{s.seed}, args...)...)
	}
	s.checked = true
	v, ok := s.checkHistory(ctx)
	if !ok {
		return
	}
	s.phases.mark("history")

	s.mu.Lock()
	faults, recovery := s.faults, s.recovery
	stopsReclaimed, stopsIdle, terminateMisses := s.stopsReclaimed, s.stopsIdle, s.terminateMisses
	acked, unknown, cancels, pauses := s.acked, s.unknown, len(s.cancels), len(s.pauses)
	all := s.all
	s.mu.Unlock()

	// The workers' own figures: the last each printed.
	var sum framework.Counters
	var splits int64
	for _, w := range all {
		c, _ := w.snapshot()
		splits += c.SplitWrites
		sum.Claimed += c.Claimed
		sum.Reclaimed += c.Reclaimed
		sum.ClaimErrors += c.ClaimErrors
		sum.StaleRejections += c.StaleRejections
		sum.OutcomesReplayed += c.OutcomesReplayed
		sum.LeasesLost += c.LeasesLost
		sum.LocalLeaseTimeouts += c.LocalLeaseTimeouts
		sum.Panics += c.Panics
		sum.HungHandlers += c.HungHandlers
		sum.OutcomesAbandoned += c.OutcomesAbandoned
		sum.RerunsFromAbandonedOutcomes += c.RerunsFromAbandonedOutcomes
		sum.Cancelled += c.Cancelled
	}
	if sum.Panics > 0 || sum.HungHandlers > 0 {
		var b strings.Builder
		for _, w := range all {
			if c, _ := w.snapshot(); c.Panics > 0 || c.HungHandlers > 0 {
				fmt.Fprintf(&b, "\n%s: %d panics, %d hung handlers; the end of its output:\n%s", w.id, c.Panics, c.HungHandlers, w.tail.last(tailBytes/2))
			}
		}
		fail("the workers counted %d handler panics and %d hung handlers; want none:%s", sum.Panics, sum.HungHandlers, b.String())
	}
	for f, n := range faults {
		if want := s.cfg.counts()[f]; n != want {
			fail("%d %v faults done; want %d", n, fault(f), want)
		}
	}
	if s.brk == "" {
		// What the soak exercised: every property checked something, and
		// the cancels reached running key heads and waiting events.
		for _, p := range history.Properties {
			if v.Checked[p] == 0 {
				fail("the history checked nothing of %s: the soak did not exercise it", p)
			}
		}
		if splits == 0 {
			fail("no worker wrote a batch of outcomes taking turns in two: the soak did not exercise it")
		}
		for _, fig := range []string{"cancelled_inprogress", "cancelled_waiting"} {
			if v.Figures[fig] == 0 {
				fail("no cancel hit a %s event: the soak did not exercise it", strings.TrimPrefix(fig, "cancelled_"))
			}
		}
		if v.Figures["steps_read"] == 0 {
			fail("no run got a recorded step back from its claim: the soak did not exercise steps across attempts")
		}
		// Each limit bound: a claim made its declared Max live.
		for _, l := range []struct {
			scope, name string
			max         int
		}{{history.ScopeKind, txKind, txLimit}, {history.ScopeQueue, bulkQueue, bulkLimit}, {history.ScopeKind, edgeKind, edgeLimit}} {
			if !slices.ContainsFunc(v.Limits, func(x history.LimitSeen) bool {
				return x.Scope == l.scope && x.Name == l.name && x.Max == l.max && x.Full > 0
			}) {
				fail("no claim of %s %s made %d attempts live, its limit: the soak did not reach it", l.scope, l.name, l.max)
			}
		}
		// The partition limits bound too: the hot tenant's own, and the
		// default for another tenant; and rows were set aside.
		if !slices.ContainsFunc(v.Limits, func(x history.LimitSeen) bool {
			return x.Scope == history.ScopePartition && x.Name == hotTenant && x.Max == hotTenantLimit && x.Full > 0
		}) {
			fail("no claim of partition %s made %d attempts live, its own limit: the soak did not reach it", hotTenant, hotTenantLimit)
		}
		if !slices.ContainsFunc(v.Limits, func(x history.LimitSeen) bool {
			return x.Scope == history.ScopePartition && x.Name != hotTenant && x.Max == partitionDefault && x.Full > 0
		}) {
			fail("no claim of a tenant under the default partition limit made %d attempts live: the soak did not reach it", partitionDefault)
		}
		if v.Figures["set_aside"] == 0 {
			fail("no claim set a row aside under a partition limit: the soak did not exercise it")
		}
		// The rate limit bound: a window of its period held its Max.
		if !slices.ContainsFunc(v.Rates, func(x history.RateSeen) bool {
			return x.Scope == history.ScopeKind && x.Name == snoozyKind && x.Max == snoozyRateMax && x.Per == snoozyRatePer && x.Full > 0
		}) {
			fail("no window of %v held %d starts of kind %s, its rate limit: the soak did not reach it", snoozyRatePer, snoozyRateMax, snoozyKind)
		}
		if !slices.ContainsFunc(v.Rates, func(x history.RateSeen) bool {
			return x.Scope == history.ScopePartition && x.Name == ratedTenant && x.Max == ratedTenantMax && x.Per == ratedTenantPer && x.Full > 0
		}) {
			fail("no window of %v held %d starts of partition %s, its rate limit: the soak did not reach it", ratedTenantPer, ratedTenantMax, ratedTenant)
		}
	}
	var limits []string
	for _, l := range v.Limits {
		outside := ""
		if l.Outside > 0 {
			outside = fmt.Sprintf(" (%d beyond it, claimed before a lowering)", l.Outside)
		}
		limits = append(limits, fmt.Sprintf("%s %s under %d: %d claims (%d handed on by completions), at most %d live%s, %d reached it",
			l.Scope, l.Name, l.Max, l.Claims, l.HandedOn, l.MostLive, outside, l.Full))
	}
	var rates []string
	for _, r := range v.Rates {
		rates = append(rates, fmt.Sprintf("%s %s under %d per %v: %d claims, %d starts, at most %d in a window, %d reached it",
			r.Scope, r.Name, r.Max, r.Per, r.Claims, r.Starts, r.Fullest, r.Full))
	}
	s.mu.Lock()
	settings, slowRenewals, slowMissed := len(s.limits), s.slowRenewals, s.slowMissed
	s.mu.Unlock()
	if s.brk == "" && slowRenewals == 0 {
		fail("no slow renewal was made (%d failed): the soak did not exercise a renewal committed after its lease's end", slowMissed)
	}

	t.Logf("soak phases: %v", &s.phases)
	t.Logf("soak details: %s faults in %v, all done in %v; %d workers started; events acknowledged %d, of enqueues that failed %d (in the table or not); "+
		"stops with a row re-claimed %d, of idle workers %d; terminates that missed the listener and were done again %d; "+
		"longest recovery kill %v stop %v terminate %v blackhole %v restart %v failover %v; "+
		"cancels %d (of running events %d, waiting %d, ready %d; the longest a cancelled handler ran on %dms); pauses %d; ticks missed %d; "+
		"workers' counters: claimed %d, reclaimed %d, claim errors %d, leases lost %d (local timeouts %d, cancelled %d), outcomes replayed %d, outcomes abandoned %d (re-runs from them %d), batches taking turns written in two %d",
		s.cfg.name, faulted.Round(time.Second), total.Round(time.Second), len(all), acked, unknown,
		stopsReclaimed, stopsIdle, terminateMisses,
		recovery[faultKill].Round(time.Millisecond), recovery[faultStop].Round(time.Millisecond), recovery[faultTerminate].Round(time.Millisecond),
		recovery[faultBlackhole].Round(time.Millisecond), recovery[faultRestart].Round(time.Millisecond), recovery[faultFailover].Round(time.Millisecond),
		cancels, v.Figures["cancelled_inprogress"], v.Figures["cancelled_waiting"], v.Figures["cancelled_ready"], v.Figures["cancelled_ran_on_ms"],
		pauses, v.Figures["ticks_missed"],
		sum.Claimed, sum.Reclaimed, sum.ClaimErrors, sum.LeasesLost, sum.LocalLeaseTimeouts, sum.Cancelled, sum.OutcomesReplayed, sum.OutcomesAbandoned, sum.RerunsFromAbandonedOutcomes, splits)
	t.Logf("soak limits (%d settings; slow renewals %d, failed %d; rows set aside by partition limits %d): %s",
		settings, slowRenewals, slowMissed, v.Figures["set_aside"], strings.Join(limits, "; "))
	t.Logf("soak rate limits: %s", strings.Join(rates, "; "))
	t.Logf("soak: seed=%d events=%d kill=%d stop=%d terminate=%d blackhole=%d restart=%d failover=%d duplicates=%d reruns=%d (outside faults %d) stale_rejected=%d steps_read=%d pickup_after_restart=%v",
		s.seed, acked, faults[faultKill], faults[faultStop], faults[faultTerminate], faults[faultBlackhole], faults[faultRestart], faults[faultFailover],
		v.Figures["duplicates"], v.Figures["reruns"], v.Figures["reruns_outside_faults"], sum.StaleRejections, v.Figures["steps_read"], pickup.Round(time.Millisecond))
	t.Log(v.String())
}
