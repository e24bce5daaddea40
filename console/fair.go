package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

// weightAction sets (POST /weights/set, with the form's "weight") or
// clears (POST /weights/clear) the weight of the form's "queue" and
// "partition" (empty: the queue's default), asking Authorize as for a
// concurrency limit of the queue (ActionSetLimit, ActionClearLimit), with
// Action.Weight and Action.Partition set and Limit.Max the weight; then
// redirects to the queues page with a message saying what happened.
func (c *Console) weightAction(w http.ResponseWriter, r *http.Request) {
	name, ok := c.limitActionName(w, r, "weight")
	if !ok || !c.checkPost(w, r) {
		return
	}
	// The names as they are, as limitAction takes them: the rows' forms
	// carry them back exactly.
	wt := lease.Weight{Queue: r.PostForm.Get("queue"), Partition: r.PostForm.Get("partition")}
	if err := lease.ValidateQueue(wt.Queue); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Not a queue name: "+strings.TrimPrefix(err.Error(), "lease: ")+".")
		return
	}
	if wt.Partition != "" {
		if err := lease.ValidatePartition(wt.Partition); err != nil {
			c.fail(w, r, http.StatusBadRequest, "Not a partition name: "+strings.TrimPrefix(err.Error(), "lease: ")+".")
			return
		}
	}
	if name == ActionSetLimit {
		s := strings.TrimSpace(r.PostForm.Get("weight"))
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > lease.MaxWeight {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a weight: give a whole number from 1 to %d.", s, lease.MaxWeight))
			return
		}
		wt.Weight = n
	}
	a := Action{Name: name, Limit: lease.Limit{Scope: lease.ScopeQueue, Name: wt.Queue, Max: wt.Weight}, Weight: true, Partition: wt.Partition}
	if err := c.authorize(r, a); err != nil {
		c.refuse(w, r, err)
		return
	}
	by := c.operator(r)
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	if name == ActionSetLimit {
		old, err := c.store.SetWeight(ctx, wt, by)
		if err != nil {
			c.dbFail(w, r, "set the weight", err)
			return
		}
		fair, err := c.fair(ctx, wt.Queue)
		if err != nil {
			c.dbFail(w, r, "read the weights", err)
			return
		}
		f = flash{OK: true, Message: setWeightMessage(wt, old, fair)}
	} else {
		was, err := c.store.ClearWeight(ctx, wt.Queue, wt.Partition, by)
		if err != nil {
			c.dbFail(w, r, "clear the weight", err)
			return
		}
		f = flash{OK: was, Message: clearWeightMessage(wt, was)}
	}
	c.log.Info("leasework console: action", "action", name, "weight", true, "queue", wt.Queue, "partition", wt.Partition, "max", wt.Weight,
		"done", f.OK, "result", f.Message, "by", by, "remote", r.RemoteAddr)
	c.redirect(w, r, PageQueues, f)
}

// agingAction sets (POST /aging/set, with the form's "after", a Go
// duration such as 10m) or clears (POST /aging/clear) the priority aging
// of the form's "queue", asking Authorize as for a concurrency limit of
// the queue (ActionSetLimit, ActionClearLimit), with Action.Aging set and
// Action.Per the wait; then redirects to the queues page with a message.
func (c *Console) agingAction(w http.ResponseWriter, r *http.Request) {
	name, ok := c.limitActionName(w, r, "aging")
	if !ok || !c.checkPost(w, r) {
		return
	}
	queue := r.PostForm.Get("queue")
	if err := lease.ValidateQueue(queue); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Not a queue name: "+strings.TrimPrefix(err.Error(), "lease: ")+".")
		return
	}
	var after time.Duration
	if name == ActionSetLimit {
		s := strings.TrimSpace(r.PostForm.Get("after"))
		d, err := time.ParseDuration(s)
		if err != nil || d < lease.MinAgeAfter || d > lease.MaxAgeAfter || d%time.Microsecond != 0 {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a wait: give a duration from %v to %v, in whole microseconds, such as 10m or 1h30m.",
				s, lease.MinAgeAfter, lease.MaxAgeAfter))
			return
		}
		after = d
	}
	if err := c.authorize(r, Action{Name: name, Limit: lease.Limit{Scope: lease.ScopeQueue, Name: queue}, Aging: true, Per: after}); err != nil {
		c.refuse(w, r, err)
		return
	}
	by := c.operator(r)
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	if name == ActionSetLimit {
		old, err := c.store.SetAging(ctx, queue, after, by)
		if err != nil {
			c.dbFail(w, r, "set the priority aging", err)
			return
		}
		was := "none"
		if old > 0 {
			was = old.String()
		}
		f = flash{OK: true, Message: fmt.Sprintf("The priority aging of queue %s is %v (was %s): a due event that has waited longer is claimed as one priority level higher.", queue, after, was)}
	} else {
		was, err := c.store.ClearAging(ctx, queue, by)
		if err != nil {
			c.dbFail(w, r, "clear the priority aging", err)
			return
		}
		f = flash{OK: was, Message: fmt.Sprintf("The priority aging of queue %s is cleared: its events are claimed at their own priority however long they wait.", queue)}
		if !was {
			f.Message = fmt.Sprintf("Queue %s had no priority aging; nothing changed.", queue)
		}
	}
	c.log.Info("leasework console: action", "action", name, "aging", true, "queue", queue, "per", after,
		"done", f.OK, "result", f.Message, "by", by, "remote", r.RemoteAddr)
	c.redirect(w, r, PageQueues, f)
}

// limitActionName is the action of the request's path ("set" or
// "clear"), for the actions of what (a 404 page for any other).
func (c *Console) limitActionName(w http.ResponseWriter, r *http.Request, what string) (ActionName, bool) {
	switch r.PathValue("action") {
	case "set":
		return ActionSetLimit, true
	case "clear":
		return ActionClearLimit, true
	}
	c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no %s action %q.", what, r.PathValue("action")))
	return "", false
}

// fair reports whether queue is fair: it has a default weight.
func (c *Console) fair(ctx context.Context, queue string) (bool, error) {
	ws, err := c.store.Weights(ctx)
	if err != nil {
		return false, err
	}
	for _, w := range ws {
		if w.Queue == queue && w.Partition == "" {
			return true, nil
		}
	}
	return false, nil
}

// setWeightMessage says what setting w did, replacing old (0: none), in
// a queue fair or not.
func setWeightMessage(w lease.Weight, old int, fair bool) string {
	was := "none"
	if old > 0 {
		was = strconv.Itoa(old)
	}
	switch {
	case w.Partition == "" && old == 0:
		return fmt.Sprintf("The default weight of queue %s is %d (was none): the queue is fair; its claims take its partitions' events in proportion to their weights, %d for a partition without one of its own.",
			w.Queue, w.Weight, w.Weight)
	case w.Partition == "":
		return fmt.Sprintf("The default weight of queue %s is %d (was %s).", w.Queue, w.Weight, was)
	case !fair:
		return fmt.Sprintf("The weight of partition %s in queue %s is %d (was %s). Queue %s is not fair until its default weight is set.", w.Partition, w.Queue, w.Weight, was, w.Queue)
	}
	return fmt.Sprintf("The weight of partition %s in queue %s is %d (was %s).", w.Partition, w.Queue, w.Weight, was)
}

// clearWeightMessage says what clearing w did: was is whether there was
// such a weight.
func clearWeightMessage(w lease.Weight, was bool) string {
	switch {
	case w.Partition == "" && was:
		return fmt.Sprintf("The default weight of queue %s is cleared: it is no longer fair, and its claims take its events in the queue's order; the weights of its partitions stay, unused until a default is set again.", w.Queue)
	case w.Partition == "":
		return fmt.Sprintf("Queue %s had no default weight (it is not fair); nothing changed.", w.Queue)
	case was:
		return fmt.Sprintf("The weight of partition %s in queue %s is cleared: it weighs the queue's default.", w.Partition, w.Queue)
	}
	return fmt.Sprintf("Partition %s had no weight of its own in queue %s; nothing changed.", w.Partition, w.Queue)
}

// weightRow is a weight on the queues page, with whether to show its
// forms.
type weightRow struct {
	lease.WeightInfo
	Set, Clear bool
}

// agingRow is a queue's priority aging on the queues page.
type agingRow struct {
	Queue      string
	After      time.Duration
	Set, Clear bool
}

// fairQueue is a fair queue's figures in its row of the queues page.
type fairQueue struct {
	Weight int // the default weight
	Active int // the partitions served now
}

// fairData reads the weights and agings into d, for the queues page,
// with whether to show their forms, and returns each fair queue's
// figures and each queue's aging, for the queues' rows. On a schema that
// predates them (migration 22), d.NoFair says so. On a failed read it
// writes the error page and returns false.
func (c *Console) fairData(ctx context.Context, w http.ResponseWriter, r *http.Request, d *queuesData) (map[string]*fairQueue, map[string]time.Duration, bool) {
	ws, err := c.store.Weights(ctx)
	if err == nil {
		var as map[string]time.Duration
		as, err = c.store.Agings(ctx)
		if err == nil {
			return c.fairRows(r, d, ws, as), as, true
		}
	}
	if c.store.Driver().SQLState(err) == sqlStateUndefinedTable {
		d.NoFair = true
		return nil, nil, true
	}
	c.dbFail(w, r, "read the weights and priority agings", err)
	return nil, nil, false
}

// fairRows fills d's weights and agings with their forms, and returns
// each fair queue's figures.
func (c *Console) fairRows(r *http.Request, d *queuesData, ws []lease.WeightInfo, as map[string]time.Duration) map[string]*fairQueue {
	d.SetWeight = c.may(r, Action{Name: ActionSetLimit, Weight: true})
	d.SetAging = c.may(r, Action{Name: ActionSetLimit, Aging: true})
	fair := map[string]*fairQueue{}
	for _, wi := range ws {
		if wi.Partition == "" {
			fair[wi.Queue] = &fairQueue{Weight: wi.Weight.Weight, Active: wi.Active}
		}
		named := lease.Limit{Scope: lease.ScopeQueue, Name: wi.Queue}
		d.Weights = append(d.Weights, weightRow{
			WeightInfo: wi,
			Set:        c.may(r, Action{Name: ActionSetLimit, Limit: named, Weight: true, Partition: wi.Partition}),
			Clear:      c.may(r, Action{Name: ActionClearLimit, Limit: named, Weight: true, Partition: wi.Partition}),
		})
	}
	queues := make([]string, 0, len(as))
	for q := range as {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	for _, q := range queues {
		named := lease.Limit{Scope: lease.ScopeQueue, Name: q}
		d.Agings = append(d.Agings, agingRow{Queue: q, After: as[q],
			Set:   c.may(r, Action{Name: ActionSetLimit, Limit: named, Aging: true}),
			Clear: c.may(r, Action{Name: ActionClearLimit, Limit: named, Aging: true}),
		})
	}
	return fair
}
