package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The properties, in the order a verdict lists them (see the package
// documentation).
const (
	Owners     = "owners"
	KeyOrder   = "key_order"
	Terminal   = "terminal"
	Effects    = "effects"
	Cancels    = "cancels"
	Ticks      = "ticks"
	Snoozes    = "snoozes"
	Retries    = "retries"
	Pauses     = "pauses"
	Limits     = "limits"
	Partitions = "partitions"
	Rates      = "rates"
	Steps      = "steps"
)

// Properties lists every property, in order.
var Properties = []string{Owners, KeyOrder, Terminal, Effects, Cancels, Ticks, Snoozes, Retries, Pauses, Limits, Partitions, Rates, Steps}

// Violation is one broken promise.
type Violation struct {
	Property string
	Row      int64 // 0 when the violation is about no one row
	Text     string
}

func (v Violation) String() string { return v.Property + ": " + v.Text }

// Verdict is what Check found.
type Verdict struct {
	// Checked counts, per property, what was checked: claims (owners),
	// keyed rows (key_order), events (terminal), Transactional events
	// DONE (effects), cancels that wrote (cancels), firings (ticks),
	// snoozes written (snoozes), retries written (retries), pauses
	// (pauses), claims under a concurrency limit of a kind or a queue
	// (limits), claims under a partition's limit and rows set aside
	// (partitions), claims under a rate limit (rates), step records
	// written and runs that reached their step (steps).
	Checked    map[string]int
	Violations []Violation
	// Limits is what the limits and partitions properties found of each
	// concurrency limit, per limit in force for the claims it checked (a
	// partition's under the default named after the partition).
	Limits []LimitSeen
	// Rates is what the rates property found of each rate limit, per
	// setting in force for the claims it checked.
	Rates []RateSeen
	// Figures are counts for the report that no property judges: re-runs
	// (a run returned nil, its completion was never written, and the event
	// ran again), those outside every fault's window, deliveries beyond
	// the first, missed ticks, how long cancelled handlers ran on.
	Figures map[string]int
}

// OK reports whether no property was violated.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

// Of returns the violations of one property.
func (v Verdict) Of(property string) []Violation {
	var out []Violation
	for _, x := range v.Violations {
		if x.Property == property {
			out = append(out, x)
		}
	}
	return out
}

// String is the verdict's one line: "history: ok owners=… key_order=…", or
// "history: 3 violations owners=…(2 violated) …".
func (v Verdict) String() string {
	var b strings.Builder
	if v.OK() {
		b.WriteString("history: ok")
	} else {
		fmt.Fprintf(&b, "history: %d violations", len(v.Violations))
	}
	for _, p := range Properties {
		fmt.Fprintf(&b, " %s=%d", p, v.Checked[p])
		if n := len(v.Of(p)); n > 0 {
			fmt.Fprintf(&b, "(%d violated)", n)
		}
	}
	return b.String()
}

// Check checks h and returns its verdict.
func Check(h *History) Verdict {
	c := newChecker(h)
	for _, r := range c.ordered {
		c.replay(r)
	}
	for _, r := range c.ordered {
		c.checkRuns(r)
	}
	c.checkKeys()
	c.checkTerminal()
	c.checkEffects()
	c.checkCancels()
	c.checkTicks()
	c.checkBudgets()
	c.checkPauses()
	c.checkLimits()
	c.checkSetAside()
	c.checkRates()
	c.checkSteps()
	sort.SliceStable(c.v.Violations, func(i, j int) bool {
		return propertyIndex(c.v.Violations[i].Property) < propertyIndex(c.v.Violations[j].Property)
	})
	return c.v
}

func propertyIndex(p string) int {
	for i, q := range Properties {
		if q == p {
			return i
		}
	}
	return len(Properties)
}

// checker holds the indexes of one history.
type checker struct {
	h         *History
	v         Verdict
	operators map[string]bool
	rows      map[int64]*row
	ordered   []*row // by row id
	byEvent   map[string]*row
	wanted    map[string]string // event id → the state it asks for
}

// row is one events row's history, and what its replay derived.
type row struct {
	id                                   int64
	eventID, kind, key, queue, partition string
	cost                                 int
	writes                               []*Write // by Seq
	runs                                 []*Run   // by Start
	effects                              []*Effect

	insert   *Write
	origMax  int              // max_attempts at insert
	keySeq   int64            // its place in its key's line
	claims   []*Write         // in order
	claimOf  map[int64]*Write // by generation
	leaseEnd map[int64]time.Time
	outcome  map[int64]*Write // the claimant's write that ended its claim, by generation
	terms    []*Write         // writes into a terminal state
	cancels  []*Write         // operators' cancel writes that end the row
	marks    []*Write         // operators' cancels that mark a running attempt's row
	stops    []*Write         // the ends of rows marked cancelled
	setAside []*Write         // claims' writes that set it aside (WAITING, keyless) under its partition's limit
	deleted  bool
}

func newChecker(h *History) *checker {
	c := &checker{
		h:         h,
		v:         Verdict{Checked: map[string]int{}, Figures: map[string]int{}},
		operators: map[string]bool{}, rows: map[int64]*row{}, byEvent: map[string]*row{},
		wanted: map[string]string{},
	}
	for _, o := range h.Operators {
		c.operators[o] = true
	}
	get := func(id int64) *row {
		r, ok := c.rows[id]
		if !ok {
			r = &row{id: id, claimOf: map[int64]*Write{}, leaseEnd: map[int64]time.Time{}, outcome: map[int64]*Write{}}
			c.rows[id] = r
		}
		return r
	}
	for i := range h.Writes {
		w := &h.Writes[i]
		r := get(w.Row)
		r.writes = append(r.writes, w)
		if r.eventID == "" {
			r.eventID, r.kind, r.key, r.queue, r.partition = w.EventID, w.Kind, w.Key, w.Queue, w.Partition
		}
		r.cost = max(r.cost, w.Cost)
	}
	for i := range h.Runs {
		run := &h.Runs[i]
		get(run.Row).runs = append(get(run.Row).runs, run)
	}
	for i := range h.Effects {
		e := &h.Effects[i]
		get(e.Row).effects = append(get(e.Row).effects, e)
	}
	for _, r := range c.rows {
		sort.Slice(r.writes, func(i, j int) bool { return r.writes[i].Seq < r.writes[j].Seq })
		sort.SliceStable(r.runs, func(i, j int) bool { return r.runs[i].Start.Before(r.runs[j].Start) })
		if r.eventID == "" && len(r.runs) > 0 {
			r.eventID, r.kind = r.runs[0].EventID, r.runs[0].Kind
		}
		c.ordered = append(c.ordered, r)
		if r.eventID != "" {
			c.byEvent[r.eventID] = r
		}
	}
	sort.Slice(c.ordered, func(i, j int) bool { return c.ordered[i].id < c.ordered[j].id })
	for _, e := range h.Enqueues {
		for _, ev := range e.Events {
			c.wanted[ev.EventID] = cmpOr(ev.Want, Done)
		}
	}
	return c
}

func (c *checker) fail(property string, r *row, format string, args ...any) {
	v := Violation{Property: property, Text: fmt.Sprintf(format, args...)}
	if r != nil {
		v.Row = r.id
		v.Text = fmt.Sprintf("row %d (%s): %s", r.id, r.eventID, v.Text)
	}
	c.v.Violations = append(c.v.Violations, v)
}

// endOf is when run stopped running: its recorded end, or its process's
// exit, or never (the zero time).
func (c *checker) endOf(run *Run) time.Time {
	if !run.End.IsZero() {
		return run.End
	}
	return c.h.Processes[run.Worker].Exited
}

// liveEnd is when run stopped being live: the earliest of its end and its
// lease's end.
func (c *checker) liveEnd(r *row, run *Run) time.Time {
	end := c.endOf(run)
	lease, ok := r.leaseEnd[run.Generation]
	switch {
	case !ok:
		return end
	case end.IsZero() || lease.Before(end):
		return lease
	}
	return end
}

func isTerminal(status string) bool {
	return status == Done || status == Failed || status == Discarded
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ts formats a time for a violation's text.
func ts(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("15:04:05.000000")
}

// after reports whether a is after b, the zero time being "never", later
// than every time.
func after(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return !b.IsZero()
	case b.IsZero():
		return false
	}
	return a.After(b)
}
