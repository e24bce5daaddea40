package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// LimitSeen is what the limits property found of one concurrency limit,
// for the claims checked against one Max: the limit in force for each
// claim (the larger of two, for a claim that may have read either).
type LimitSeen struct {
	Scope, Name string
	Max         int
	Claims      int // claims checked against Max
	MostLive    int // the most attempts live at one of those claims, itself included
	Full        int // claims that made at least Max attempts live: the limit was reached
	// Outside is the most attempts live beyond Max at one of those claims
	// that a lowered limit had left outside it (see checkLimit).
	Outside int
	// HandedOn counts, of Claims, those written by the transaction of a
	// completion of another row: a place handed on by a completion.
	HandedOn int
}

// attempt is one claim under a limit and its life in the database.
type attempt struct {
	r          *row
	claim      *Write
	start, end time.Time // [start, end)
	max        int       // the limit in force for its claim
	// lowered: attempts whose claim wrote before it may run outside the
	// limit (a lowering took their slots); zero when no lowering did.
	lowered time.Time
}

// checkLimits checks every concurrency limit the test set.
func (c *checker) checkLimits() {
	type ident struct{ scope, name string }
	var order []ident
	sets := map[ident][]Limit{}
	for _, l := range c.h.Limits {
		if l.Scope != ScopeKind && l.Scope != ScopeQueue && l.Scope != ScopePartition || l.Max < 0 {
			c.fail(Limits, nil, "a limit setting of scope %q, name %q, max %d: want scope %q, %q or %q and a max of 0 or more",
				l.Scope, l.Name, l.Max, ScopeKind, ScopeQueue, ScopePartition)
			continue
		}
		id := ident{l.Scope, l.Name}
		if _, ok := sets[id]; !ok {
			order = append(order, id)
		}
		sets[id] = append(sets[id], l)
	}
	completions := map[int64]bool{}
	for i := range c.h.Writes {
		w := &c.h.Writes[i]
		if w.Old.Status == InProgress && (w.Op == Delete || w.New.Status == Done) {
			completions[w.Txid] = true
		}
	}
	for _, id := range order {
		if id.scope == ScopePartition && id.name == "" {
			continue // the default: below
		}
		c.checkLimit(id.scope, id.name, sets[id], completions)
	}
	// The default partition limit binds every partition that has no
	// setting of its own; each is checked apart, under the default's
	// settings. (A partition given its own setting after the default
	// is checked under its own only, from when it was set: a lenient
	// check of the claims before, which the soak does not make.)
	if def := sets[ident{ScopePartition, ""}]; len(def) > 0 {
		var parts []string
		seen := map[string]bool{}
		for _, r := range c.ordered {
			if r.partition != "" && !seen[r.partition] && len(sets[ident{ScopePartition, r.partition}]) == 0 {
				seen[r.partition] = true
				parts = append(parts, r.partition)
			}
		}
		sort.Strings(parts)
		for _, p := range parts {
			c.checkLimit(ScopePartition, p, def, completions)
		}
	}
}

// checkSetAside checks that no row set aside by its partition's limit is
// left behind: every row a claim set aside (WAITING, keyless) was brought
// back READY (or ended, by a cancel), unless it was inserted after the
// test began to wait for every event to finish.
func (c *checker) checkSetAside() {
	for _, r := range c.ordered {
		if len(r.setAside) == 0 {
			continue
		}
		c.v.Checked[Partitions]++
		c.v.Figures["set_aside"] += len(r.setAside)
		last := r.writes[len(r.writes)-1]
		if last.Op == Delete || last.New.Status != Waiting || r.insert == nil || !r.insert.At.Before(c.h.Settled) {
			continue
		}
		w := r.setAside[len(r.setAside)-1]
		c.fail(Partitions, r, "set aside by %s at %s (audit %d), and left behind: still WAITING at the end", w.Writer, ts(w.At), w.Seq)
	}
}

// checkLimit checks one limit: no claim of its kind or queue made more
// attempts live than the limit in force for it allowed.
//
// An attempt is live in the database over [start, end) of its span (see
// row.span). The ends are exclusive, and the starts are late enough,
// for a correct run never to show more than the limit: a claim takes a
// slot an ending write freed only after that write committed, so its own
// write (and the clock its audit reads) comes after the ending write's;
// it takes a slot whose holder's lease ran out only when that lease is
// at most its statement's time, which is at most its write's. The claim's
// write comes before its commit, and the ending write before its own, so
// the intervals are, if anything, longer at their start and shorter at
// their end than the database's, and the order between them is kept.
//
// The count is taken at each claim. A lowered limit binds the claims after
// it, but the attempts that held slots past its new Max run on outside
// it: until they end, up to the old Max may be live. So the attempts live
// at a claim whose own claim wrote before the last lowering (which may be
// those outside) are allowed beyond Max, but never beyond the largest Max
// in force since the first of them was claimed.
func (c *checker) checkLimit(scope, name string, sets []Limit, completions map[int64]bool) {
	property := Limits
	if scope == ScopePartition {
		property = Partitions
	}
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].Invoked.Before(sets[j].Invoked) })
	var atts []*attempt
	for _, r := range c.ordered {
		if (scope == ScopeKind && r.kind != name) || (scope == ScopeQueue && r.queue != name) ||
			(scope == ScopePartition && r.partition != name) {
			continue
		}
		for _, cl := range r.claims {
			most, lowered, bound := limitFor(sets, cl)
			if !bound {
				continue // claimed before the limit surely was in force: it may hold no slot
			}
			start, end := r.span(cl)
			if !end.After(start) {
				continue // never live: owners reports a lease given already over
			}
			atts = append(atts, &attempt{r: r, claim: cl, start: start, end: end, max: most, lowered: lowered})
		}
	}
	sort.SliceStable(atts, func(i, j int) bool {
		if !atts[i].start.Equal(atts[j].start) {
			return atts[i].start.Before(atts[j].start)
		}
		return atts[i].claim.Seq < atts[j].claim.Seq
	})
	seen := map[int]*LimitSeen{}
	var live []*attempt
	for _, a := range atts {
		kept := live[:0]
		for _, x := range live {
			if x.end.After(a.start) {
				kept = append(kept, x)
			}
		}
		live = append(kept, a)
		n := len(live)
		c.v.Checked[property]++
		allowed, outside, since := a.max, 0, time.Time{}
		for _, x := range live[:n-1] {
			if x.claim.At.Before(a.lowered) {
				if outside++; since.IsZero() || x.claim.At.Before(since) {
					since = x.claim.At
				}
			}
		}
		if outside > 0 {
			allowed = min(a.max+outside, max(a.max, maxInForce(sets, since, a.claim.At.Add(time.Microsecond))))
		}
		s := seen[a.max]
		if s == nil {
			s = &LimitSeen{Scope: scope, Name: name, Max: a.max}
			seen[a.max] = s
		}
		s.Claims++
		if completions[a.claim.Txid] {
			s.HandedOn++
		}
		s.MostLive = max(s.MostLive, n)
		if n >= a.max {
			s.Full++
		}
		if n > a.max && n <= allowed {
			s.Outside = max(s.Outside, n-a.max)
		}
		if n > allowed {
			const shown = 4
			var others []string
			for i, x := range live[:n-1] {
				if i == shown {
					others = append(others, fmt.Sprintf("and %d more", n-1-shown))
					break
				}
				others = append(others, fmt.Sprintf("row %d generation %d by %s, live %s to %s",
					x.r.id, x.claim.New.Generation, x.claim.Writer, ts(x.start), ts(x.end)))
			}
			why := fmt.Sprintf("its limit of %d", a.max)
			if outside > 0 {
				why += fmt.Sprintf(" and the %d attempts claimed before it was lowered (at most %d allowed)", outside, allowed)
			}
			c.fail(property, a.r, "%s %q: the claim by %s at %s (generation %d, live to %s) made %d attempts live, above %s: %s",
				scope, name, a.claim.Writer, ts(a.start), a.claim.New.Generation, ts(a.end), n, why, strings.Join(others, "; "))
		}
	}
	maxes := make([]int, 0, len(seen))
	for m := range seen {
		maxes = append(maxes, m)
	}
	sort.Ints(maxes)
	for _, m := range maxes {
		c.v.Limits = append(c.v.Limits, *seen[m])
	}
}

// limitFor returns the limit in force for claim cl under a limit's
// settings (made one after another, in order), whether the limit surely
// bound it, and the time before which a claimed attempt may run outside
// the limit: the return of the last lowering that may bind cl (zero when
// none did). A setting binds a claim whose statement began after the
// setting returned; one that returned later (or never) but was invoked
// before the claim's write may have committed before the claim's
// snapshot, or not: the claim may keep either, and the larger is allowed.
// (The write's clock reads microseconds: one is added, so that a setting
// invoked within the microsecond of the write counts as maybe.)
func limitFor(sets []Limit, cl *Write) (most int, lowered time.Time, bound bool) {
	maybe := cl.At.Add(time.Microsecond)
	for i, l := range sets {
		switch {
		case !l.Returned.IsZero() && l.Returned.Before(cl.Stmt):
			most, bound = l.Max, true
		case bound && l.Invoked.Before(maybe):
			most = max(most, l.Max)
		default:
			continue
		}
		if i > 0 && l.Max < sets[i-1].Max {
			lowered = l.Returned
			if lowered.IsZero() || lowered.After(maybe) {
				lowered = maybe
			}
		}
	}
	return most, lowered, bound
}

// maxInForce returns the largest Max of the settings in force at some time
// from from to to: the one in force at from, and those made since.
func maxInForce(sets []Limit, from, to time.Time) int {
	most := 0
	for _, l := range sets {
		switch {
		case l.Invoked.After(to):
		case !l.Returned.IsZero() && !l.Returned.After(from):
			most = l.Max // in force at from, unless a later one returned before it too
		default:
			most = max(most, l.Max)
		}
	}
	return most
}

// span returns the interval [start, end) over which the attempt claim cl
// began was live in the database: from the claim's write to the earliest
// of the write that ended it (a write that moved the row off the claim's
// generation or out of INPROGRESS, or deleted it) and the end of its
// lease, as a claim reads the lease: a renewal extends it; a write that
// moves it into the past (the expiry fixture) ends it at that write, from
// whose commit on a claim sees it over; a lease that ran out before a
// write began ends the attempt where it ran out. A renewal whose guard
// passed before the lease ran out extends it even if its write came a
// little after: no claim takes the slot of a holder whose row is locked.
func (r *row) span(cl *Write) (start, end time.Time) {
	gen := cl.New.Generation
	lease := cl.New.LeaseUntil
	for _, w := range r.writes {
		if w.Seq <= cl.Seq {
			continue
		}
		if w.Op == Delete || w.New.Generation != gen || w.New.Status != InProgress {
			return cl.At, earliest(lease, w.At)
		}
		if !lease.After(w.Stmt) {
			return cl.At, lease // it ran out before this write began
		}
		if w.New.LeaseUntil.After(w.At) {
			lease = w.New.LeaseUntil
		} else {
			lease = earliest(lease, w.At)
		}
	}
	return cl.At, lease
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
