package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// RateSeen is what the rates property found of one rate limit, for the
// claims checked against one setting (Max per Per): the setting in force
// for each claim (the larger Max and the shorter Per of two, for a claim
// that may have read either).
type RateSeen struct {
	Scope, Name string
	Max         int
	Per         time.Duration
	Claims      int // claims checked against it, each a start of its row's cost
	Starts      int // the starts those claims took
	Fullest     int // the most starts in the window of Per that ends at one of those claims
	Full        int // claims whose window held Max starts: the limit was reached
}

// rateStart is one claim under a rate limit: an attempt started at the
// claim statement's time, taking its row's cost in starts.
type rateStart struct {
	r     *row
	claim *Write
	cost  int
	max   int
	per   time.Duration
}

// checkRates checks every rate limit the test set.
func (c *checker) checkRates() {
	type ident struct{ scope, name string }
	var order []ident
	sets := map[ident][]RateLimit{}
	for _, l := range c.h.RateLimits {
		if l.Scope != ScopeKind && l.Scope != ScopeQueue && l.Scope != ScopePartition || l.Max < 1 || l.Per <= 0 {
			c.fail(Rates, nil, "a rate limit setting of scope %q, name %q, max %d per %v: want scope %q, %q or %q, a max of 1 or more and a period",
				l.Scope, l.Name, l.Max, l.Per, ScopeKind, ScopeQueue, ScopePartition)
			continue
		}
		id := ident{l.Scope, l.Name}
		if _, ok := sets[id]; !ok {
			order = append(order, id)
		}
		sets[id] = append(sets[id], l)
	}
	for _, id := range order {
		if id.scope == ScopePartition && id.name == "" {
			continue // the default: below
		}
		c.checkRate(id.scope, id.name, sets[id])
	}
	// The default partition rate limit binds every partition that has no
	// setting of its own; each is checked apart, under the default's
	// settings, as the default concurrency limit is (checkLimits).
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
			c.checkRate(ScopePartition, p, def)
		}
	}
}

// checkRate checks one rate limit: no window of its period holds more
// starts of its kind, queue or partition than its Max.
//
// An attempt starts at its claim's statement time (Write.Stmt: the
// statement_timestamp() the claim records its starts at), whatever the
// claim took (a first attempt, a retry, an expired lease taken back), and
// takes its row's cost. Every window of length Per holds no more starts
// than the window (t - Per, t] that ends at its last start t, the store's
// own count at a claim of time t, so those are the windows checked: at
// each claim, the starts of every claim bound by the limit whose time is
// within Per before it, its own and those of its statement time included,
// must be at most the Max in force for it. A claim is bound when a
// setting returned before its statement began; one made while the first
// setting was under way may have recorded its starts or not, and is
// neither checked nor counted. A lowered Max keeps the starts already
// made, as the store does: a claim after it is checked against the new
// Max with them.
func (c *checker) checkRate(scope, name string, sets []RateLimit) {
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].Invoked.Before(sets[j].Invoked) })
	var starts []rateStart
	for _, r := range c.ordered {
		if (scope == ScopeKind && r.kind != name) || (scope == ScopeQueue && r.queue != name) ||
			(scope == ScopePartition && r.partition != name) {
			continue
		}
		for _, cl := range r.claims {
			most, per, bound := rateFor(sets, cl)
			if !bound {
				continue
			}
			starts = append(starts, rateStart{r: r, claim: cl, cost: max(r.cost, 1), max: most, per: per})
		}
	}
	sort.SliceStable(starts, func(i, j int) bool {
		if !starts[i].claim.Stmt.Equal(starts[j].claim.Stmt) {
			return starts[i].claim.Stmt.Before(starts[j].claim.Stmt)
		}
		return starts[i].claim.Seq < starts[j].claim.Seq
	})
	sums := make([]int, len(starts)+1) // sums[i]: the starts of starts[:i]
	for i, s := range starts {
		sums[i+1] = sums[i] + s.cost
	}
	type setting struct {
		max int
		per time.Duration
	}
	seen := map[setting]*RateSeen{}
	for i := 0; i < len(starts); {
		at := starts[i].claim.Stmt
		// The claims of one statement time end one window: the largest
		// Max and the shortest Per of theirs.
		most, per, end := 0, time.Duration(1<<63-1), i
		for ; end < len(starts) && starts[end].claim.Stmt.Equal(at); end++ {
			most, per = max(most, starts[end].max), min(per, starts[end].per)
		}
		from := sort.Search(len(starts), func(k int) bool { return starts[k].claim.Stmt.After(at.Add(-per)) })
		n := sums[end] - sums[from]
		for _, s := range starts[i:end] {
			c.v.Checked[Rates]++
			k := setting{s.max, s.per}
			rs := seen[k]
			if rs == nil {
				rs = &RateSeen{Scope: scope, Name: name, Max: s.max, Per: s.per}
				seen[k] = rs
			}
			rs.Claims++
			rs.Starts += s.cost
			rs.Fullest = max(rs.Fullest, n)
			if n >= s.max {
				rs.Full++
			}
		}
		if n > most {
			const shown = 4
			var in []string
			for k, x := range starts[from:end] {
				if k == shown {
					in = append(in, fmt.Sprintf("and %d more", end-from-shown))
					break
				}
				in = append(in, fmt.Sprintf("row %d generation %d (cost %d) by %s at %s", x.r.id, x.claim.New.Generation, x.cost, x.claim.Writer, ts(x.claim.Stmt)))
			}
			last := starts[end-1]
			c.fail(Rates, last.r, "%s %q: the claim by %s at %s (generation %d) made %d starts in the window of %v that ends then, above its Max of %d: %s",
				scope, name, last.claim.Writer, ts(at), last.claim.New.Generation, n, per, most, strings.Join(in, "; "))
		}
		i = end
	}
	keys := make([]setting, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].max != keys[j].max {
			return keys[i].max < keys[j].max
		}
		return keys[i].per < keys[j].per
	})
	for _, k := range keys {
		c.v.Rates = append(c.v.Rates, *seen[k])
	}
}

// rateFor returns the setting in force for claim cl under a rate limit's
// settings (made one after another, in order), and whether the limit
// surely bound it. A setting binds a claim whose statement began after the
// setting returned; one that returned later (or never) but was invoked
// before the claim's write may have committed before the claim's
// snapshot, or not: the larger Max and the shorter Per are allowed. (The
// write's clock reads microseconds: one is added, as in limitFor.)
func rateFor(sets []RateLimit, cl *Write) (most int, per time.Duration, bound bool) {
	maybe := cl.At.Add(time.Microsecond)
	for _, l := range sets {
		switch {
		case !l.Returned.IsZero() && l.Returned.Before(cl.Stmt):
			most, per, bound = l.Max, l.Per, true
		case bound && l.Invoked.Before(maybe):
			most, per = max(most, l.Max), min(per, l.Per)
		}
	}
	return most, per, bound
}
