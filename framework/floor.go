package framework

import (
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// A claim reads the READY rows of each priority level in due order, from
// the oldest, and the expired leases in lease order, from the oldest.
// Every row claimed leaves an entry in the READY index, and every row
// finished one in the lease index whose lease runs out a lease later,
// until vacuum removes them; while a long transaction or a REPEATABLE
// READ reader pins the xmin horizon vacuum can remove none: the entries
// of every row claimed since pile up ahead of the rows still READY and of
// the leases that really ran out, and each claim visits them all (2,080
// index and heap buffers to find 10 rows behind 102,000 such entries).
//
// So each queue's claims start each level at a floor
// (lease.ClaimRequest.DueFrom): floorSlack before the latest due time it
// has claimed at that level; and they read expired leases from a floor
// (lease.ClaimRequest.ExpiredFrom): floorSlack before the database clock
// of its latest claim that took every expired lease it found, for a
// lease that runs out later was given by a claim after that one, or
// renewed after it.
//
// A row due before its level's floor and still READY is one committed
// more than floorSlack after it came due (a long enqueuing transaction, a
// completion in the caller's transaction that promoted a key's next
// event), given a run time already past, or left by a claim that rolled
// back; a lease that ran out before the lease floor and was not taken is
// one a claim skipped while another statement held its row (a late
// owner's rejected write) or one moved back by hand. A sweep, a claim
// without floors, takes them: it runs beside the queue's claim loop, not
// in it, so that its walk through the entries vacuum cannot remove (a
// second and more under a long pin) never holds up the claims of new
// work; at least every fullEvery and no more often than fullShare times
// its own duration. The claims after it take the rows due after what it
// found. Such a row waits that much longer; none waits for ever.
const (
	floorSlack = time.Second
	fullEvery  = time.Second
	fullShare  = 20
	// sweepShare bounds the slots a sweep may take: a tenth of the
	// queue's concurrency, at least one, so that the claim loop keeps
	// most of the free slots while a slow sweep runs.
	sweepShare = 10
)

// floors is one queue's claim floors, shared by its claim loop and its
// sweep.
type floors struct {
	mu        sync.Mutex
	from      []time.Time // per priority level; zero: from the oldest; nil: no claim yet
	leaseFrom time.Time   // expired leases from here; zero: from the oldest
	fullAt    time.Time   // a sweep is due at or after this
	sweeping  bool        // a sweep is in flight
}

// next returns the DueFrom and ExpiredFrom of the claim loop's next claim;
// full is true when the claim reads from the oldest (no floors yet, or
// since the last failed claim).
func (f *floors) next() (from []time.Time, leaseFrom time.Time, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.from == nil {
		return nil, time.Time{}, true
	}
	return append([]time.Time(nil), f.from...), f.leaseFrom, false
}

// sweepDue reports whether a sweep should start now, and marks it in
// flight when so: the queue has floors, the last sweep (or the first
// claim) was long enough ago, and none is running.
func (f *floors) sweepDue(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.from == nil || f.sweeping || now.Before(f.fullAt) {
		return false
	}
	f.sweeping = true
	return true
}

// sweepSkipped ends a sweep that did not claim (no slot was free): the
// next tick tries again.
func (f *floors) sweepSkipped() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweeping = false
}

// claimed moves the floors after a claim of up to limit rows that
// returned claims (err nil), given full (it read from the oldest: a
// sweep, or a loop claim without floors), the lease it asked for and how
// long it took. Within a level the claim takes the due rows in order,
// from its floor: any row of the level due before the latest it took, and
// not taken, was locked by another claim or not yet committed. After a
// failed claim, or one that shows the database clock behind a floor (a
// failover to a server whose clock is behind), the next claim of the
// loop reads from the oldest. A claim that a concurrency or rate limit
// held back (heldBack) may have skipped rows before those it took: it
// moves no floor.
func (f *floors) claimed(claims []leasework.Claim, heldBack bool, err error, full bool, limit int, leaseFor, took time.Duration, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if full {
		f.sweeping = false
	}
	if err != nil {
		f.reset()
		return
	}
	if full || f.from == nil {
		f.fullAt = now.Add(max(fullEvery, fullShare*took))
	}
	if f.from == nil {
		f.from = make([]time.Time, lease.MaxPriority+1)
	}
	// Every floor is before the database clock of a claim made earlier,
	// so before the clock of every later claim.
	var clock time.Time
	reclaimed := 0
	for _, c := range claims {
		clock = c.LeaseUntil.Add(-leaseFor) // one statement: the same for every claim
		if c.Reclaimed {
			reclaimed++
		}
	}
	if heldBack {
		return
	}
	if len(claims) > 0 {
		behind := f.leaseFrom.After(clock)
		for _, at := range f.from {
			behind = behind || at.After(clock)
		}
		if behind {
			f.reset()
			return
		}
	}
	var latest [lease.MaxPriority + 1]time.Time
	for _, c := range claims {
		if c.Reclaimed || c.Priority < 0 || c.Priority > lease.MaxPriority {
			continue
		}
		if at := c.DueAt.Add(-floorSlack); at.After(latest[c.Priority]) {
			latest[c.Priority] = at
		}
	}
	// A floored claim only raises a floor. A claim from the oldest sets
	// the floor of each level it took rows of, lower too: rows it found
	// before the floor (a long transaction's, committed late) may have
	// more behind them, and the claims after it take those in turn
	// instead of one batch per sweep.
	for p, at := range latest {
		if !at.IsZero() && (full || at.After(f.from[p])) {
			f.from[p] = at
		}
	}
	// The claim read the expired leases before the ready rows, up to its
	// whole limit: when it took fewer, it took every one it found, and
	// every lease still running at its clock runs out after it. When it
	// took as many as it could, a claim from the oldest may have left
	// more before the floor: the loop reads them from the oldest too.
	switch {
	case len(claims) > 0 && reclaimed < limit:
		if at := clock.Add(-floorSlack); at.After(f.leaseFrom) {
			f.leaseFrom = at
		}
	case full && reclaimed >= limit:
		f.leaseFrom = time.Time{}
	}
}

// reset drops the floors, under f.mu: the loop's next claim reads from the
// oldest.
func (f *floors) reset() {
	f.from, f.leaseFrom, f.fullAt = nil, time.Time{}, time.Time{}
}
