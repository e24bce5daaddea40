package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

// The scopes of a fair queue's weight and of a queue's priority aging, as
// limits lists them and as the audit (lease.LimitChange) records them.
const (
	scopeWeight = "weight"
	scopeAging  = "aging"
)

// fairing says whether the change is of a weight or an aging: -weight,
// -clear-weight, -aging or -clear-aging.
func (l *limitsCmd) fairing() bool {
	return l.given["weight"] || l.clearWeight || l.given["aging"] || l.clearAging
}

// weighing says whether the change is of a weight: -weight or
// -clear-weight.
func (l *limitsCmd) weighing() bool { return l.given["weight"] || l.clearWeight }

// checkFair checks a change of a weight or an aging, act ("-weight N",
// "-clear-weight", "-aging D" or "-clear-aging"): it names a queue with
// -queue and, for a weight, a partition with -partition or none (the
// queue's default).
func (l *limitsCmd) checkFair(act string) error {
	given := l.given
	switch {
	case l.weighing() && (given["kind"] || given["partition-default"]):
		return usagef("%s is for a fair queue's weight: name the queue with -queue Q, and a partition with -partition P (without it, the queue's default weight); a kind has no weight, and -partition-default names the default limit of the partitions", act)
	case !l.weighing() && (given["kind"] || given["partition-default"] || given["partition"]):
		return usagef("%s is for a queue's priority aging: name the queue with -queue Q alone (a kind or a partition has no aging of its own)", act)
	case !given["queue"] && l.weighing():
		return usagef("name the fair queue: -queue Q (with -partition P for a partition's weight, without it for the queue's default)")
	case !given["queue"]:
		return usagef("name the queue of the priority aging: -queue Q")
	case l.queue == "":
		return usagef("-queue is empty; name the queue (%s for the default queue)", lease.DefaultQueue)
	}
	if err := lease.ValidateQueue(l.queue); err != nil {
		return usagef("-queue: %v", err)
	}
	if given["partition"] {
		if l.partition == "" {
			return usagef("-partition is empty; name the partition to weigh, or leave -partition out for the queue's default weight")
		}
		if err := lease.ValidatePartition(l.partition); err != nil {
			return usagef("-partition: %v", err)
		}
	}
	if given["weight"] && (l.weight < 1 || l.weight > lease.MaxWeight) {
		return usagef("-weight is %d; it must be from 1 to %d", l.weight, lease.MaxWeight)
	}
	if given["aging"] && (l.aging < lease.MinAgeAfter || l.aging > lease.MaxAgeAfter || l.aging%time.Microsecond != 0) {
		return usagef("-aging is %v; it must be from %v to %v, in whole microseconds", l.aging, lease.MinAgeAfter, lease.MaxAgeAfter)
	}
	return nil
}

// weightOf names a weight in a sentence: "default weight of queue bulk",
// "weight of partition acme in queue bulk".
func weightOf(queue, partition string) string {
	if partition == "" {
		return "default weight of queue " + queue
	}
	return "weight of partition " + partition + " in queue " + queue
}

// weightJSON is a weight in limits -json, beside the limits.
type weightJSON struct {
	Scope string `json:"scope"` // "weight"
	// Name is the fair queue; Partition the partition weighed, "" for
	// the queue's default.
	Name      string `json:"name"`
	Partition string `json:"partition"`
	Weight    int    `json:"weight"`
	// Active is, for the queue's default, how many of its partitions fair
	// scheduling serves now; for a partition, 1 while it is served, else
	// 0.
	Active int       `json:"active"`
	SetAt  time.Time `json:"set_at"`
	SetBy  string    `json:"set_by"`
}

// agingJSON is a queue's priority aging in limits -json.
type agingJSON struct {
	Scope string `json:"scope"` // "aging"
	Name  string `json:"name"`  // the queue
	// After is how long a due event waits before it is claimed as one
	// priority level higher: a Go duration ("10m0s"), and in
	// microseconds.
	After   string `json:"after"`
	AfterUS int64  `json:"after_us"`
}

// fairListing reads the weights and agings for execList.
func fairListing(ctx context.Context, st *lease.Store) ([]lease.WeightInfo, []agingJSON, error) {
	ws, err := st.Weights(ctx)
	if err != nil {
		return nil, nil, err
	}
	as, err := st.Agings(ctx)
	if err != nil {
		return nil, nil, err
	}
	ag := make([]agingJSON, 0, len(as))
	for q, d := range as {
		ag = append(ag, agingJSON{Scope: scopeAging, Name: q, After: d.String(), AfterUS: d.Microseconds()})
	}
	// Agings is a map: list them by queue.
	slices.SortFunc(ag, func(a, b agingJSON) int { return strings.Compare(a.Name, b.Name) })
	return ws, ag, nil
}

func toWeightJSON(w lease.WeightInfo) weightJSON {
	return weightJSON{Scope: scopeWeight, Name: w.Queue, Partition: w.Partition, Weight: w.Weight.Weight, Active: w.Active, SetAt: w.SetAt.UTC(), SetBy: w.SetBy}
}

// writeFairTables prints the weights' table and the agings', each after
// a blank line when something was printed before (sep).
func writeFairTables(out *printer, ws []lease.WeightInfo, ag []agingJSON, sep bool) error {
	if len(ws) > 0 {
		if sep {
			if err := out.Linef(""); err != nil {
				return err
			}
		}
		rows := make([][]string, len(ws))
		for i, w := range ws {
			part := defaultPartitionName
			if w.Partition != "" {
				part = truncate(w.Partition, limitNameWidth)
			}
			rows[i] = []string{scopeWeight, truncate(w.Queue, limitNameWidth), part, itoa(int64(w.Weight.Weight)), itoa(int64(w.Active)),
				timeCell(&w.SetAt), orDash(truncate(w.SetBy, keyWidth))}
		}
		if err := out.Table([]string{"SCOPE", "NAME", "PARTITION", "WEIGHT", "ACTIVE", "SET AT", "SET BY"}, rows); err != nil {
			return err
		}
		sep = true
	}
	if len(ag) == 0 {
		return nil
	}
	if sep {
		if err := out.Linef(""); err != nil {
			return err
		}
	}
	rows := make([][]string, len(ag))
	for i, a := range ag {
		rows[i] = []string{scopeAging, truncate(a.Name, limitNameWidth), a.After}
	}
	return out.Table([]string{"SCOPE", "NAME", "AFTER"}, rows)
}

type setWeightJSON struct {
	Scope     string `json:"scope"` // "weight"
	Name      string `json:"name"`
	Partition string `json:"partition"`
	Weight    int    `json:"weight"`
	// Old is the weight it replaced; null when there was none.
	Old *int `json:"old"`
	// Active is what limits lists for the weight just after; Fair whether
	// the queue is fair (it has a default weight).
	Active int  `json:"active"`
	Fair   bool `json:"fair"`
}

func (l *limitsCmd) execSetWeight(ctx context.Context, st *lease.Store, out *printer) error {
	w := lease.Weight{Queue: l.queue, Partition: l.partition, Weight: l.weight}
	old, err := st.SetWeight(ctx, w, l.by)
	if err != nil {
		return err
	}
	res := setWeightJSON{Scope: scopeWeight, Name: l.queue, Partition: l.partition, Weight: l.weight}
	if old > 0 {
		res.Old = &old
	}
	ws, err := st.Weights(ctx)
	if err != nil {
		return err
	}
	for _, info := range ws {
		if info.Queue == l.queue && info.Partition == "" {
			res.Fair = true
		}
		if info.Queue == l.queue && info.Partition == l.partition {
			res.Active = info.Active
		}
	}
	if out.json {
		return out.JSON(res)
	}
	was := "none"
	if res.Old != nil {
		was = itoa(int64(*res.Old))
	}
	line := fmt.Sprintf("%s set to %d (was %s)", weightOf(l.queue, l.partition), l.weight, was)
	switch {
	case l.partition == "" && res.Old == nil:
		line += fmt.Sprintf(": queue %s is fair; its claims take its partitions' events in proportion to their weights, %d for a partition without one of its own", l.queue, l.weight)
	case l.partition == "":
		line += fmt.Sprintf("; %d %s served now", res.Active, plural(res.Active, "partition", "partitions"))
	case !res.Fair:
		line += fmt.Sprintf("; queue %s is not fair until its default weight is set (leasework limits -queue %s -weight N)", l.queue, l.queue)
	case res.Active > 0:
		line += "; served now"
	default:
		line += "; not served now (it joins with its next due event)"
	}
	return out.Linef("%s", line)
}

type clearFairJSON struct {
	Scope     string  `json:"scope"` // "weight" or "aging"
	Name      string  `json:"name"`
	Partition *string `json:"partition,omitempty"` // a weight's: "" for the queue's default
	// Cleared is false when there was none.
	Cleared bool `json:"cleared"`
}

func (l *limitsCmd) execClearWeight(ctx context.Context, st *lease.Store, out *printer) error {
	was, err := st.ClearWeight(ctx, l.queue, l.partition, l.by)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(clearFairJSON{Scope: scopeWeight, Name: l.queue, Partition: &l.partition, Cleared: was})
	}
	switch {
	case !was && l.partition == "":
		return out.Linef("queue %s had no default weight (it is not fair); nothing changed", l.queue)
	case !was:
		return out.Linef("partition %s had no weight of its own in queue %s; nothing changed", l.partition, l.queue)
	case l.partition == "":
		return out.Linef("cleared the default weight of queue %s: it is no longer fair, and its claims take its events in the queue's order; the weights of its partitions stay, unused until a default is set again", l.queue)
	}
	return out.Linef("cleared the weight of partition %s in queue %s: it weighs the queue's default", l.partition, l.queue)
}

type setAgingJSON struct {
	Scope   string `json:"scope"` // "aging"
	Name    string `json:"name"`
	After   string `json:"after"`
	AfterUS int64  `json:"after_us"`
	// Old is the aging it replaced: null when there was none.
	Old *struct {
		After   string `json:"after"`
		AfterUS int64  `json:"after_us"`
	} `json:"old"`
}

func (l *limitsCmd) execSetAging(ctx context.Context, st *lease.Store, out *printer) error {
	old, err := st.SetAging(ctx, l.queue, l.aging, l.by)
	if err != nil {
		return err
	}
	res := setAgingJSON{Scope: scopeAging, Name: l.queue, After: l.aging.String(), AfterUS: l.aging.Microseconds()}
	was := "none"
	if old > 0 {
		res.Old = &struct {
			After   string `json:"after"`
			AfterUS int64  `json:"after_us"`
		}{old.String(), old.Microseconds()}
		was = old.String()
	}
	if out.json {
		return out.JSON(res)
	}
	return out.Linef("priority aging of queue %s set to %v (was %s): a due event that has waited longer is claimed as one priority level higher", l.queue, l.aging, was)
}

func (l *limitsCmd) execClearAging(ctx context.Context, st *lease.Store, out *printer) error {
	was, err := st.ClearAging(ctx, l.queue, l.by)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(clearFairJSON{Scope: scopeAging, Name: l.queue, Cleared: was})
	}
	if !was {
		return out.Linef("queue %s had no priority aging; nothing changed", l.queue)
	}
	return out.Linef("cleared the priority aging of queue %s: its events are claimed at their own priority however long they wait", l.queue)
}
