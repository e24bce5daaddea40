package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasework/leasework/lease"
)

// limitNameWidth is how much of a limit's kind or queue the table shows;
// -json prints it whole.
const limitNameWidth = 40

// maxChanges is the most changes -changes lists (Store.LimitChanges' bound).
const maxChanges = 1000

// limitsCmd lists the concurrency and rate limits and the fair queues'
// weights and agings; with -kind, -queue, -partition or -partition-default
// and -max or -clear it sets or clears a concurrency limit, and with -rate
// or -clear-rate a rate limit, with -queue (and
// -partition) and -weight or -clear-weight a weight, with -queue and
// -aging or -clear-aging a queue's priority aging, and with -changes it
// lists the audit.
type limitsCmd struct {
	fs          *flag.FlagSet   // to tell a flag given from its default
	given       map[string]bool // the flags given, by name, as check found them
	kind        string
	queue       string
	partition   string
	partDefault bool
	max         int
	clear       bool
	rate        string
	clearRate   bool
	weight      int
	clearWeight bool
	aging       time.Duration
	clearAging  bool
	by          string
	changes     bool
	n           int
}

func (l *limitsCmd) flags(fs *flag.FlagSet) {
	l.fs = fs
	fs.StringVar(&l.kind, "kind", "", "the limit of this `kind`, in every queue")
	fs.StringVar(&l.queue, "queue", "", "the limit of this `queue`, of every kind")
	fs.StringVar(&l.partition, "partition", "", "the limit of this `partition` (an event's partition key), of every kind and queue")
	fs.BoolVar(&l.partDefault, "partition-default", false, "the default limit, or rate limit, of the partitions: each partition without one of its own is held to it, on its own")
	fs.IntVar(&l.max, "max", 0, fmt.Sprintf("set the limit to at most `N` live attempts, from 0 (none starts: the kind, queue or partition is held) to %d", lease.MaxLimit))
	fs.BoolVar(&l.clear, "clear", false, "remove the limit")
	fs.StringVar(&l.rate, "rate", "", fmt.Sprintf("set the rate limit of the kind, queue or partition (or, with -partition-default, of each partition without one of its own) to at most M attempt starts in any window of PERIOD: `M/PERIOD`, such as 100/1m, 5/500ms or 100/s (M from 1 to %d, PERIOD from %v to %v)", lease.MaxRateStarts, lease.MinRatePeriod, lease.MaxRatePeriod))
	fs.BoolVar(&l.clearRate, "clear-rate", false, "remove the rate limit of the kind, queue or partition, or the default rate limit of the partitions")
	fs.IntVar(&l.weight, "weight", 0, fmt.Sprintf("set the weight of the queue's partitions (its default: the queue becomes fair), or with -partition of that partition, to `N`, from 1 to %d", lease.MaxWeight))
	fs.BoolVar(&l.clearWeight, "clear-weight", false, "remove the queue's default weight (the queue is no longer fair), or with -partition that partition's weight")
	fs.DurationVar(&l.aging, "aging", 0, fmt.Sprintf("set the queue's priority aging: a due event that has waited longer than `D` is claimed as one priority level higher (D from %v to %v)", lease.MinAgeAfter, lease.MaxAgeAfter))
	fs.BoolVar(&l.clearAging, "clear-aging", false, "remove the queue's priority aging")
	fs.StringVar(&l.by, "by", operatorName(), "who sets or clears the limit, as the audit (-changes) records it: a `name`, by default your user name")
	fs.BoolVar(&l.changes, "changes", false, "list the latest changes of the limits instead, latest first: when, which, from what to what, by whom")
	fs.IntVar(&l.n, "n", 20, fmt.Sprintf("with -changes, list at most `N` changes, up to %d", maxChanges))
}

// operatorName is who runs the command, for -by: the operating system's
// user name, or $USER, or "" when neither is known.
func operatorName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

func (l *limitsCmd) check() error {
	given := map[string]bool{}
	l.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	l.given = given

	if l.changes {
		for _, f := range []string{"kind", "queue", "partition", "partition-default", "max", "clear", "rate", "clear-rate", "weight", "clear-weight", "aging", "clear-aging", "by"} {
			if given[f] {
				return usagef("-changes lists the changes of every limit: it takes -n, not -%s", f)
			}
		}
		if l.n < 1 || l.n > maxChanges {
			return usagef("-n is %d; it must be from 1 to %d", l.n, maxChanges)
		}
		return nil
	}
	if given["n"] {
		return usagef("-n counts the changes that -changes lists; add -changes")
	}
	if given["partition-default"] && !l.partDefault {
		return usagef("-partition-default=false names no limit; give -partition-default to name the default limit of the partitions")
	}
	var named []string
	for _, f := range []string{"kind", "queue", "partition", "partition-default"} {
		if given[f] {
			named = append(named, "-"+f)
		}
	}
	var acts []string
	for _, f := range []struct {
		name string
		on   bool
	}{{"-max N", given["max"]}, {"-clear", l.clear}, {"-rate M/PERIOD", given["rate"]}, {"-clear-rate", l.clearRate},
		{"-weight N", given["weight"]}, {"-clear-weight", l.clearWeight}, {"-aging D", given["aging"]}, {"-clear-aging", l.clearAging}} {
		if f.on {
			acts = append(acts, f.name)
		}
	}
	switch {
	case len(named) == 0 && len(acts) == 0:
		if given["by"] {
			return usagef("-by names who sets or clears a limit: name it with -kind K, -queue Q, -partition P or -partition-default, and add -max N or -clear (or -rate M/PERIOD or -clear-rate); or -queue Q with -weight N, -clear-weight, -aging D or -clear-aging")
		}
		return nil // list them
	case l.fairing() && len(acts) > 1:
		not := "not both"
		if len(acts) > 2 {
			not = "not more"
		}
		return usagef("give one of %s, %s: each call makes one change", strings.Join(acts, " and "), not)
	case l.fairing():
		if err := l.checkFair(acts[0]); err != nil {
			return err
		}
		return l.checkBy()
	case len(named) > 1:
		not := "not both"
		if len(named) > 2 {
			not = "not more"
		}
		return usagef("give one of %s, %s: a limit is of one kind (in every queue), of one queue (of every kind), of one partition, or the default of the partitions", strings.Join(named, " and "), not)
	case len(named) == 0 && len(acts) == 1 && l.rating():
		return usagef("name the rate limit to change: -kind K (a kind, in every queue), -queue Q (a queue, of every kind), -partition P (a partition) or -partition-default (each partition without a rate limit of its own)")
	case len(named) == 0:
		return usagef("name the limit to change: -kind K (a kind, in every queue), -queue Q (a queue, of every kind), -partition P (a partition) or -partition-default (each partition without a limit of its own)")
	case given["max"] && l.clear && len(acts) == 2:
		return usagef("give one of -max N (set the limit) and -clear (remove it), not both")
	case len(acts) > 1:
		not := "not both"
		if len(acts) > 2 {
			not = "not more"
		}
		return usagef("give one of %s, %s: each call makes one change", strings.Join(acts, " and "), not)
	}
	scope, name := l.limit()
	switch {
	case scope == lease.ScopePartition && l.partDefault:
	case scope == lease.ScopePartition && name == "" && l.rating():
		return usagef("-partition is empty; name the partition to limit, or give -partition-default for the default rate limit of the partitions")
	case scope == lease.ScopePartition && name == "":
		return usagef("-partition is empty; name the partition to limit, or give -partition-default for the default limit of the partitions")
	case scope == lease.ScopePartition:
		if err := lease.ValidatePartition(name); err != nil {
			return usagef("-partition: %v", err)
		}
	case name == "" && scope == lease.ScopeQueue:
		return usagef("-queue is empty; name the queue to limit (%s for the default queue)", lease.DefaultQueue)
	case name == "":
		return usagef("-kind is empty; name the kind to limit")
	case scope == lease.ScopeKind:
		if err := lease.ValidateKind(name); err != nil {
			return usagef("-kind: %v", err)
		}
	default:
		if err := lease.ValidateQueue(name); err != nil {
			return usagef("-queue: %v", err)
		}
	}
	if len(acts) == 0 {
		if scope == lease.ScopePartition {
			return usagef("say what to do with the %s: -max N sets it, -clear removes it; -rate M/PERIOD sets the %s, -clear-rate removes that (leasework limits alone lists the limits)",
				limitOf(scope, name), rateLimitOf(scope, name))
		}
		if scope == lease.ScopeQueue {
			return usagef("say what to do with the %s: -max N sets it, -clear removes it; -rate M/PERIOD sets its rate limit, -clear-rate removes that; -weight N makes it fair, -clear-weight ends that; -aging D sets its priority aging, -clear-aging removes it (leasework limits alone lists the limits)", limitOf(scope, name))
		}
		return usagef("say what to do with the %s: -max N sets it, -clear removes it; -rate M/PERIOD sets its rate limit, -clear-rate removes that (leasework limits alone lists the limits)", limitOf(scope, name))
	}
	if given["rate"] {
		if _, _, err := lease.ParseRate(l.rate); err != nil {
			return usagef("-rate: %s", strings.TrimPrefix(err.Error(), "lease: "))
		}
	}
	if given["max"] && (l.max < 0 || l.max > lease.MaxLimit) {
		return usagef("-max is %d; it must be from 0 (no attempt starts: the %s is held) to %d", l.max, scope, lease.MaxLimit)
	}
	return l.checkBy()
}

// checkBy checks -by, who makes the change, for the audit.
func (l *limitsCmd) checkBy() error {
	switch {
	case l.by == "" && l.given["by"]:
		return usagef("-by is empty; name who changes the limit, for the audit (leasework limits -changes)")
	case l.by == "":
		return usagef("your user name could not be found; name who changes the limit with -by, for the audit (leasework limits -changes)")
	case !utf8.ValidString(l.by):
		return usagef("-by %q is not valid UTF-8", l.by)
	case strings.IndexByte(l.by, 0) >= 0:
		return usagef("-by %q contains a NUL byte, which PostgreSQL text cannot hold", l.by)
	}
	return nil
}

// rating says whether the change is of a rate limit: -rate or -clear-rate.
func (l *limitsCmd) rating() bool { return l.given["rate"] || l.clearRate }

// limit returns the scope and name -kind, -queue, -partition or
// -partition-default gives: the default partition limit's name is empty.
func (l *limitsCmd) limit() (scope, name string) {
	switch {
	case l.given["queue"]:
		return lease.ScopeQueue, l.queue
	case l.partDefault:
		return lease.ScopePartition, ""
	case l.given["partition"]:
		return lease.ScopePartition, l.partition
	}
	return lease.ScopeKind, l.kind
}

// limitOf names a limit in a sentence: "limit of kind send-email", "limit
// of partition acme", "default limit of the partitions".
func limitOf(scope, name string) string {
	if scope == lease.ScopePartition && name == "" {
		return "default limit of the partitions"
	}
	return "limit of " + scope + " " + name
}

// rateLimitOf names a rate limit in a sentence: "rate limit of kind
// sms.send", "rate limit of partition acme", "default rate limit of the
// partitions".
func rateLimitOf(scope, name string) string {
	if scope == lease.ScopePartition && name == "" {
		return "default rate limit of the partitions"
	}
	return "rate limit of " + scope + " " + name
}

func (l *limitsCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	switch {
	case l.changes:
		return l.execChanges(ctx, st, out)
	case l.clear:
		return l.execClear(ctx, st, out)
	case l.given["max"]:
		return l.execSet(ctx, st, out)
	case l.clearRate:
		return l.execClearRate(ctx, st, out)
	case l.given["rate"]:
		return l.execSetRate(ctx, st, out)
	case l.clearWeight:
		return l.execClearWeight(ctx, st, out)
	case l.given["weight"]:
		return l.execSetWeight(ctx, st, out)
	case l.clearAging:
		return l.execClearAging(ctx, st, out)
	case l.given["aging"]:
		return l.execSetAging(ctx, st, out)
	}
	return l.execList(ctx, st, out)
}

type limitJSON struct {
	Scope string `json:"scope"` // "kind", "queue" or "partition"
	// Name is the kind, the queue or the partition: "" for the default
	// limit of the partitions.
	Name string `json:"name"`
	Max  int    `json:"max"`
	// Live is how many attempts hold a slot of the limit now: for the
	// default limit of the partitions, of every partition under it (each
	// is held to max on its own).
	Live int `json:"live"`
	// HeldBack is how many due READY events of its kind or queue wait
	// for a place while the limit is full; 0 while it has room. For a
	// partition's limit, the events it set aside (WAITING without a
	// key), of every partition under it for the default.
	HeldBack int64     `json:"held_back"`
	SetAt    time.Time `json:"set_at"`
	SetBy    string    `json:"set_by"`
}

// rateLimitJSON is a rate limit in limits -json, beside the concurrency
// limits (limitJSON).
type rateLimitJSON struct {
	Scope string `json:"scope"` // "rate:kind", "rate:queue" or "rate:partition"
	// Name is the kind, the queue or the partition: "" for the default
	// rate limit of the partitions.
	Name string `json:"name"`
	// Max starts in any window of per: per as a Go duration ("1m0s"),
	// per_us in microseconds. For the default rate limit of the
	// partitions, of each partition under it, on its own.
	Max   int    `json:"max"`
	Per   string `json:"per"`
	PerUS int64  `json:"per_us"`
	// Recent is how many starts it counts in the window that ends now:
	// for the default rate limit of the partitions, those of every
	// partition under it.
	Recent int `json:"recent"`
	// NextAt is when it next has room for a start while it is full;
	// null while it has room, and always for the default rate limit of
	// the partitions (each partition has a window of its own: list -id
	// says when an event's has room).
	NextAt *time.Time `json:"next_at"`
	// HeldBack is, for a partition's rate limit, how many of the
	// partition's events are set aside (WAITING without a key), whatever
	// set them aside (its concurrency limit too); for the default, those
	// of every partition under it. Null for a kind's or a queue's, whose
	// events held back stay READY, and are not counted.
	HeldBack *int64    `json:"held_back"`
	SetAt    time.Time `json:"set_at"`
	SetBy    string    `json:"set_by"`
}

// rateScope is a rate limit's scope as the CLI prints it, and as the
// audit records it: "rate:kind", "rate:queue", "rate:partition".
func rateScope(scope string) string { return "rate:" + scope }

func (l *limitsCmd) execList(ctx context.Context, st *lease.Store, out *printer) error {
	ls, err := st.Limits(ctx)
	if err != nil {
		return err
	}
	rls, err := st.RateLimits(ctx)
	if err != nil {
		return err
	}
	ws, ag, err := fairListing(ctx, st)
	if err != nil {
		return err
	}
	if out.json {
		res := make([]any, 0, len(ls)+len(rls)+len(ws)+len(ag))
		for _, li := range ls {
			res = append(res, limitJSON{Scope: li.Scope, Name: li.Name, Max: li.Max, Live: li.Live, HeldBack: li.HeldBack, SetAt: li.SetAt.UTC(), SetBy: li.SetBy})
		}
		for _, rl := range rls {
			res = append(res, toRateLimitJSON(rl))
		}
		for _, w := range ws {
			res = append(res, toWeightJSON(w))
		}
		for _, a := range ag {
			res = append(res, a)
		}
		return out.JSON(res)
	}
	if len(ls) == 0 && len(rls) == 0 && len(ws) == 0 && len(ag) == 0 {
		return out.Linef("no limits are set")
	}
	if len(ls) > 0 {
		rows := make([][]string, len(ls))
		for i, li := range ls {
			name := truncate(li.Name, limitNameWidth)
			if li.Scope == lease.ScopePartition && li.Name == "" {
				name = defaultPartitionName
			}
			rows[i] = []string{li.Scope, name, liveCell(li), itoa(li.HeldBack), timeCell(&li.SetAt), orDash(truncate(li.SetBy, keyWidth))}
		}
		if err := out.Table([]string{"SCOPE", "NAME", "LIVE/MAX", "HELD BACK", "SET AT", "SET BY"}, rows); err != nil {
			return err
		}
	}
	if len(rls) > 0 {
		if len(ls) > 0 {
			if err := out.Linef(""); err != nil {
				return err
			}
		}
		rows := make([][]string, len(rls))
		for i, rl := range rls {
			name, rate, held := truncate(rl.Name, limitNameWidth), rl.RateLimit.String(), "-"
			if rl.Scope == lease.ScopePartition {
				held = itoa(rl.HeldBack)
				if rl.Name == "" {
					name, rate = defaultPartitionName, rate+" each"
				}
			}
			rows[i] = []string{rateScope(rl.Scope), name, rate, itoa(int64(rl.Recent)),
				nextRoomCell(rl), held, timeCell(&rl.SetAt), orDash(truncate(rl.SetBy, keyWidth))}
		}
		if err := out.Table([]string{"SCOPE", "NAME", "MAX/PERIOD", "RECENT", "NEXT ROOM", "HELD BACK", "SET AT", "SET BY"}, rows); err != nil {
			return err
		}
	}
	return writeFairTables(out, ws, ag, len(ls) > 0 || len(rls) > 0)
}

func toRateLimitJSON(rl lease.RateLimitInfo) rateLimitJSON {
	res := rateLimitJSON{Scope: rateScope(rl.Scope), Name: rl.Name, Max: rl.Max, Per: rl.Per.String(), PerUS: rl.Per.Microseconds(),
		Recent: rl.Recent, SetAt: rl.SetAt.UTC(), SetBy: rl.SetBy}
	if !rl.NextAt.IsZero() {
		at := rl.NextAt.UTC()
		res.NextAt = &at
	}
	if rl.Scope == lease.ScopePartition {
		res.HeldBack = &rl.HeldBack
	}
	return res
}

// nextRoomCell is when a rate limit next has room: "now" while it has
// some, else the time, to the millisecond (periods may be short); "-" for
// the default rate limit of the partitions, whose partitions each have a
// window of their own.
func nextRoomCell(rl lease.RateLimitInfo) string {
	if rl.Scope == lease.ScopePartition && rl.Name == "" {
		return "-"
	}
	if rl.NextAt.IsZero() {
		return "now"
	}
	return rl.NextAt.UTC().Format("2006-01-02 15:04:05.000Z")
}

// defaultPartitionName stands for the default limit of the partitions in
// the NAME column (its name is empty).
const defaultPartitionName = "(default)"

// liveCell is a limit's live attempts of its maximum: "3/5", "0/0 held";
// for the default limit of the partitions, the live attempts of every
// partition under it and the maximum of each: "7 (5 each)".
func liveCell(li lease.LimitInfo) string {
	s := fmt.Sprintf("%d/%d", li.Live, li.Max)
	if li.Scope == lease.ScopePartition && li.Name == "" {
		s = fmt.Sprintf("%d (%d each)", li.Live, li.Max)
	}
	if li.Max == 0 {
		s += " held"
	}
	return s
}

type setLimitJSON struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	Max   int    `json:"max"`
	// Old is the limit it replaced; null when there was none.
	Old *int `json:"old"`
	// Live is how many attempts held a slot of it just after.
	Live int `json:"live"`
}

func (l *limitsCmd) execSet(ctx context.Context, st *lease.Store, out *printer) error {
	scope, name := l.limit()
	old, err := st.SetLimit(ctx, lease.Limit{Scope: scope, Name: name, Max: l.max}, l.by)
	if err != nil {
		return err
	}
	res := setLimitJSON{Scope: scope, Name: name, Max: l.max, Old: orNone(old)}
	ls, err := st.Limits(ctx)
	if err != nil {
		return err
	}
	for _, li := range ls {
		if li.Scope == scope && li.Name == name {
			res.Live = li.Live
		}
	}
	if out.json {
		return out.JSON(res)
	}
	was := "none"
	if res.Old != nil {
		was = itoa(int64(*res.Old))
	}
	noun := "attempts"
	if l.max == 1 {
		noun = "attempt"
	}
	line := fmt.Sprintf("%s set to %d live %s (was %s)", limitOf(scope, name), l.max, noun, was)
	if scope == lease.ScopePartition && name == "" {
		line = fmt.Sprintf("%s set to %d live %s each (was %s)", limitOf(scope, name), l.max, noun, was)
	}
	live := fmt.Sprintf("%d live now", res.Live)
	if scope == lease.ScopePartition && name == "" {
		live += " in the partitions under it"
	}
	switch {
	case l.max == 0:
		line += "; no attempt of it starts until the limit is raised or cleared; those running finish"
	case res.Old != nil && *res.Old > l.max:
		line += fmt.Sprintf("; %s; attempts that held its slots past %d run on outside it until they end", live, l.max)
	default:
		line += "; " + live
	}
	return out.Linef("%s", line)
}

type clearLimitJSON struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	// Cleared is false when there was no such limit.
	Cleared bool `json:"cleared"`
}

func (l *limitsCmd) execClear(ctx context.Context, st *lease.Store, out *printer) error {
	scope, name := l.limit()
	was, err := st.ClearLimit(ctx, scope, name, l.by)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(clearLimitJSON{Scope: scope, Name: name, Cleared: was})
	}
	switch {
	case scope == lease.ScopePartition && name == "" && !was:
		return out.Linef("there was no default limit of the partitions; nothing changed")
	case scope == lease.ScopePartition && name == "":
		return out.Linef("cleared the default limit of the partitions: those without a limit of their own are no longer limited; their events set aside come back as workers claim")
	case scope == lease.ScopePartition && !was:
		return out.Linef("partition %s had no limit of its own; nothing changed", name)
	case scope == lease.ScopePartition:
		return out.Linef("cleared the limit of partition %s: the default limit of the partitions applies to it, if one is set; its events set aside come back as workers claim", name)
	case !was:
		return out.Linef("%s %s had no limit; nothing changed", scope, name)
	}
	return out.Linef("cleared the limit of %s %s: its attempts start as workers claim them", scope, name)
}

type limitChangeJSON struct {
	At time.Time `json:"at"`
	// Scope is "kind", "queue" or "partition" for a concurrency limit,
	// "rate:kind", "rate:queue" or "rate:partition" for a rate limit,
	// "weight" for a fair queue's weight, "aging" for a queue's priority
	// aging.
	Scope string `json:"scope"`
	// Name is the kind, the queue or the partition limited ("" for the
	// default limit, or rate limit, of the partitions); for a weight or an
	// aging, the queue.
	Name string `json:"name"`
	// Partition is a weight's partition, "" for the queue's default;
	// absent for every other scope.
	Partition *string `json:"partition,omitempty"`
	// Old and New are the limit before and after; null for none (the
	// change set a new limit, or cleared one). For a rate limit, its
	// most starts in a period; for a weight, the weight; null both for
	// an aging.
	Old *int `json:"old"`
	New *int `json:"new"`
	// Per and PerUS are a rate limit's period, as set, or as it was for
	// a clear: a Go duration ("1m0s"), and in microseconds; for an aging,
	// its wait, as set, or as it was for a clear; absent for a
	// concurrency limit and a weight.
	Per   string `json:"per,omitempty"`
	PerUS int64  `json:"per_us,omitempty"`
	By    string `json:"by"`
}

func (l *limitsCmd) execChanges(ctx context.Context, st *lease.Store, out *printer) error {
	cs, err := st.LimitChanges(ctx, l.n)
	if err != nil {
		return err
	}
	if out.json {
		res := make([]limitChangeJSON, len(cs))
		for i, c := range cs {
			res[i] = limitChangeJSON{At: c.At.UTC(), Scope: c.Scope, Name: c.Name, Old: orNone(c.Old), New: orNone(c.New), By: c.By}
			if c.Scope == scopeWeight {
				res[i].Partition = &c.Partition
			}
			if c.Per > 0 {
				res[i].Per, res[i].PerUS = c.Per.String(), c.Per.Microseconds()
			}
		}
		return out.JSON(res)
	}
	if len(cs) == 0 {
		return out.Linef("no limit has been set")
	}
	rows := make([][]string, len(cs))
	for i, c := range cs {
		per := "-"
		if c.Per > 0 {
			per = c.Per.String()
		}
		part := "-"
		if c.Scope == scopeWeight {
			part = defaultPartitionName
			if c.Partition != "" {
				part = truncate(c.Partition, limitNameWidth)
			}
		}
		old, now := maxCell(c.Old), maxCell(c.New)
		if c.Scope == scopeAging {
			// Whether the queue had an aging before and after; its wait
			// is the PERIOD.
			old, now = onOrDash(c.Old), onOrDash(c.New)
		}
		name := truncate(c.Name, limitNameWidth)
		if c.Name == "" && (c.Scope == lease.ScopePartition || c.Scope == rateScope(lease.ScopePartition)) {
			name = defaultPartitionName
		}
		rows[i] = []string{timeCell(&c.At), c.Scope, name, part, old, now, per, orDash(truncate(c.By, keyWidth))}
	}
	return out.Table([]string{"AT", "SCOPE", "NAME", "PARTITION", "OLD", "NEW", "PERIOD", "BY"}, rows)
}

// onOrDash is "on" for an aging the audit says a queue had (1), "-" for
// none.
func onOrDash(n int) string {
	if n == 1 {
		return "on"
	}
	return "-"
}

// orNone returns n, or nil for -1: no limit.
func orNone(n int) *int {
	if n < 0 {
		return nil
	}
	return &n
}

// maxCell is a limit's maximum in the audit: "none" for no limit.
func maxCell(n int) string {
	if n < 0 {
		return "none"
	}
	return itoa(int64(n))
}

// rateJSON is a rate limit's figures: max starts in any window of per.
type rateJSON struct {
	Max   int    `json:"max"`
	Per   string `json:"per"`
	PerUS int64  `json:"per_us"`
}

type setRateLimitJSON struct {
	Scope string `json:"scope"` // "rate:kind", "rate:queue" or "rate:partition"
	// Name is "" for the default rate limit of the partitions.
	Name string `json:"name"`
	rateJSON
	// Old is the rate limit it replaced; null when there was none.
	Old *rateJSON `json:"old"`
	// Recent is how many starts it counted in its window just after, and
	// NextAt when it next has room while full; null while it has room
	// (and for the default rate limit of the partitions). HeldBack is,
	// for a partition's, its events set aside just after (as limits
	// -json gives it); null for a kind's or a queue's.
	Recent   int        `json:"recent"`
	NextAt   *time.Time `json:"next_at"`
	HeldBack *int64     `json:"held_back"`
}

func (l *limitsCmd) execSetRate(ctx context.Context, st *lease.Store, out *printer) error {
	scope, name := l.limit()
	most, per, err := lease.ParseRate(l.rate)
	if err != nil {
		return err
	}
	rl := lease.RateLimit{Scope: scope, Name: name, Max: most, Per: per}
	old, had, err := st.SetRateLimit(ctx, rl, l.by)
	if err != nil {
		return err
	}
	res := setRateLimitJSON{Scope: rateScope(scope), Name: name, rateJSON: rateJSON{Max: most, Per: per.String(), PerUS: per.Microseconds()}}
	if had {
		res.Old = &rateJSON{Max: old.Max, Per: old.Per.String(), PerUS: old.Per.Microseconds()}
	}
	rls, err := st.RateLimits(ctx)
	if err != nil {
		return err
	}
	for _, info := range rls {
		if info.Scope == scope && info.Name == name {
			listed := toRateLimitJSON(info)
			res.Recent, res.NextAt, res.HeldBack = listed.Recent, listed.NextAt, listed.HeldBack
		}
	}
	if out.json {
		return out.JSON(res)
	}
	was := "none"
	if had {
		was = fmt.Sprintf("%d per %v", old.Max, old.Per)
	}
	line := fmt.Sprintf("%s set to %d %s per %v (was %s); %d in the window now",
		rateLimitOf(scope, name), most, plural(most, "start", "starts"), per, was, res.Recent)
	if scope == lease.ScopePartition && name == "" {
		line = fmt.Sprintf("%s set to %d %s per %v each (was %s); %d in the windows of the partitions under it now",
			rateLimitOf(scope, name), most, plural(most, "start", "starts"), per, was, res.Recent)
	}
	if res.NextAt != nil {
		line += fmt.Sprintf(": it is full, and the next start is allowed at %s", nextRoomCell(lease.RateLimitInfo{NextAt: *res.NextAt}))
	}
	if res.HeldBack != nil && *res.HeldBack > 0 {
		line += fmt.Sprintf("; %d %s set aside, waiting for room", *res.HeldBack, plural(int(*res.HeldBack), "event", "events"))
	}
	return out.Linef("%s", line)
}

// plural is one or many, by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (l *limitsCmd) execClearRate(ctx context.Context, st *lease.Store, out *printer) error {
	scope, name := l.limit()
	was, err := st.ClearRateLimit(ctx, scope, name, l.by)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(clearLimitJSON{Scope: rateScope(scope), Name: name, Cleared: was})
	}
	switch {
	case scope == lease.ScopePartition && name == "" && !was:
		return out.Linef("there was no default rate limit of the partitions; nothing changed")
	case scope == lease.ScopePartition && name == "":
		return out.Linef("cleared the default rate limit of the partitions: those without a rate limit of their own are no longer rate limited; the events it set aside come back as workers claim, as far as the limits left let them")
	case scope == lease.ScopePartition && !was:
		return out.Linef("partition %s had no rate limit of its own; nothing changed", name)
	case scope == lease.ScopePartition:
		return out.Linef("cleared the rate limit of partition %s: the default rate limit of the partitions applies to it, if one is set; the events it set aside come back as workers claim, as far as the limits left let them", name)
	case !was:
		return out.Linef("%s %s had no rate limit; nothing changed", scope, name)
	}
	return out.Linef("cleared the rate limit of %s %s: its attempts start as workers claim them", scope, name)
}
