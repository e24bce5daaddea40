package framework

import (
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// A claim reads the READY rows of each priority level in due order, from
// the oldest. Every row claimed leaves an entry in that index until vacuum
// removes it, and while a long transaction or a REPEATABLE READ reader
// pins the xmin horizon vacuum can remove none: the entries of every row
// claimed since pile up ahead of the rows still READY, and each claim
// visits them all (2,080 index and heap buffers to find 10 rows behind
// 102,000 such entries). So each queue's claims start each level at a
// floor (lease.ClaimRequest.DueFrom): floorSlack before the latest due
// time it has claimed at that level. A row due before its level's floor
// and still READY is one committed more than floorSlack after it came
// due (a long enqueuing transaction, a completion in the caller's
// transaction that promoted a key's next event), given a run time already
// past, or left by a claim that rolled back: a claim without floors, at
// least every fullEvery and no more often than fullShare times its own
// duration, takes it, and the claims after that one take the rows due
// after it. Such a row waits that much longer; none waits for ever.
const (
	floorSlack = time.Second
	fullEvery  = time.Second
	fullShare  = 20
)

// floors is one queue's claim floors. Only the queue's claim loop uses it.
type floors struct {
	from   []time.Time // per priority level; zero: from the oldest
	fullAt time.Time   // the first claim at or after this reads from the oldest
}

// next returns the DueFrom of the queue's next claim, nil when that claim
// reads every level from the oldest.
func (f *floors) next(now time.Time) []time.Time {
	if f.from == nil || !now.Before(f.fullAt) {
		return nil
	}
	return f.from
}

// claimed moves the floors after a claim that returned claims (err nil),
// given full (it read from the oldest), the lease it asked for and how
// long it took. Within a level the claim takes the due rows in order, from its floor:
// any row of the level due before the latest it took, and not taken, was
// locked by another claim or not yet committed. After a failed claim, or
// one that shows the database clock behind a floor (a failover to a
// server whose clock is behind), the next claim reads from the oldest.
func (f *floors) claimed(claims []leasework.Claim, err error, full bool, leaseFor time.Duration, took time.Duration, now time.Time) {
	if err != nil {
		*f = floors{}
		return
	}
	if full || f.from == nil {
		f.fullAt = now.Add(max(fullEvery, fullShare*took))
	}
	if f.from == nil {
		f.from = make([]time.Time, lease.MaxPriority+1)
	}
	// Every floor is before the due time of a row claimed earlier, so
	// before the database clock of every later claim.
	for _, c := range claims {
		clock := c.LeaseUntil.Add(-leaseFor)
		for _, at := range f.from {
			if at.After(clock) {
				*f = floors{}
				return
			}
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
	// instead of one batch per claim from the oldest.
	for p, at := range latest {
		if !at.IsZero() && (full || at.After(f.from[p])) {
			f.from[p] = at
		}
	}
}
