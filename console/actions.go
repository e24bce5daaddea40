package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// maxReasonBytes bounds a cancel's reason.
const maxReasonBytes = 1000

// eventAction takes an event's action (POST /events/{id}/{action}) and
// redirects to the event's page, or to the held keys (the form's "back"
// field is "keys"), with a message saying what happened.
func (c *Console) eventAction(w http.ResponseWriter, r *http.Request) {
	name := ActionName(r.PathValue("action"))
	switch name {
	case ActionRequeue, ActionDiscard, ActionCancel:
	default:
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no event action %q.", name))
		return
	}
	if !c.checkPost(w, r) {
		return
	}
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	a := Action{Name: name, ID: id}
	if name == ActionDiscard || name == ActionRequeue {
		s := r.PostForm.Get("generation")
		g, err := strconv.ParseInt(s, 10, 64)
		if err != nil || g < 1 {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a generation: the %s form carries the generation the page showed, a whole number from 1.", s, name))
			return
		}
		a.Generation = g
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if len(reason) > maxReasonBytes {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The reason is %d bytes long; at most %d are allowed.", len(reason), maxReasonBytes))
		return
	}
	if err := c.authorize(r, a); err != nil {
		c.refuse(w, r, err)
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	var err error
	switch name {
	case ActionRequeue:
		f, err = c.requeue(ctx, leasework.Ref{ID: id, Generation: a.Generation})
	case ActionDiscard:
		f, err = c.discard(ctx, leasework.Ref{ID: id, Generation: a.Generation})
	case ActionCancel:
		f, err = c.cancel(ctx, id, reason)
	}
	if errors.Is(err, lease.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No event has id %d; nothing was done.", id))
		return
	}
	if err != nil {
		c.dbFail(w, r, string(name)+" the event", err)
		return
	}
	c.log.Info("leasework console: action", "action", name, "id", id, "done", f.OK, "result", f.Message, "by", c.operator(r), "remote", r.RemoteAddr)
	back := "events/" + strconv.FormatInt(id, 10)
	if r.PostForm.Get("back") == PageKeys {
		back = PageKeys
	}
	c.redirect(w, r, back, f)
}

func (c *Console) requeue(ctx context.Context, ref leasework.Ref) (flash, error) {
	ids, err := c.store.Requeue(ctx, lease.RequeueRequest{Refs: []leasework.Ref{ref}})
	if err != nil || len(ids) == 1 {
		return flash{OK: true, Message: fmt.Sprintf("Event %d requeued: it is READY, due now, with its whole attempt budget again.", ref.ID)}, err
	}
	row, err := c.store.Get(ctx, ref.ID)
	if err != nil {
		return flash{}, err
	}
	if row.Status == leasework.StatusFailed {
		return flash{Message: fmt.Sprintf("Event %d was not requeued: the page showed it FAILED at generation %d, and it is FAILED at generation %d now. It changed since the page was loaded; look at it again.",
			ref.ID, ref.Generation, row.Generation)}, nil
	}
	return flash{Message: fmt.Sprintf("Event %d was not requeued: it is %s, and only a FAILED event can be requeued.", ref.ID, row.Status)}, nil
}

func (c *Console) discard(ctx context.Context, ref leasework.Ref) (flash, error) {
	gen, err := c.store.Discard(ctx, ref)
	if errors.Is(err, lease.ErrNotFailed) {
		row, err := c.store.Get(ctx, ref.ID)
		if err != nil {
			return flash{}, err
		}
		return flash{Message: fmt.Sprintf("Event %d was not discarded: the page showed it FAILED at generation %d, and it is %s at generation %d now. It changed since the page was loaded; look at it again.",
			ref.ID, ref.Generation, row.Status, row.Generation)}, nil
	}
	if err != nil {
		return flash{}, err
	}
	return flash{OK: true, Message: fmt.Sprintf("Event %d discarded (generation %d): it is DISCARDED, and the events waiting behind its key, if any, go on.", ref.ID, gen)}, nil
}

func (c *Console) cancel(ctx context.Context, id int64, reason string) (flash, error) {
	res, err := c.store.Cancel(ctx, id, reason)
	if errors.Is(err, lease.ErrFinished) {
		row, err := c.store.Get(ctx, id)
		if err != nil {
			return flash{}, err
		}
		return flash{Message: fmt.Sprintf("Event %d was not cancelled: it is %s already.", id, row.Status)}, nil
	}
	if err != nil {
		return flash{}, err
	}
	if res.Stopping {
		return flash{OK: true, Message: fmt.Sprintf("Event %d cancelled: the attempt running it (generation %d) is told to stop; it ends DISCARDED, and its key passes on, once that attempt stops or its lease ends.", id, res.Generation)}, nil
	}
	return flash{OK: true, Message: fmt.Sprintf("Event %d cancelled (generation %d): it is DISCARDED.", id, res.Generation)}, nil
}

// queueAction pauses or resumes the queue of the form's "queue" field
// (POST /queues/pause, /queues/resume) and redirects to the queues page.
func (c *Console) queueAction(w http.ResponseWriter, r *http.Request) {
	name := ActionName(r.PathValue("action"))
	if name != ActionPause && name != ActionResume {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no queue action %q.", name))
		return
	}
	if !c.checkPost(w, r) {
		return
	}
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	if err := lease.ValidateQueue(queue); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Not a queue name: "+strings.TrimPrefix(err.Error(), "lease: ")+".")
		return
	}
	if err := c.authorize(r, Action{Name: name, Queue: queue}); err != nil {
		c.refuse(w, r, err)
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	if name == ActionPause {
		ran, err := c.store.PauseQueue(ctx, queue)
		if err != nil {
			c.dbFail(w, r, "pause the queue", err)
			return
		}
		f = flash{OK: ran, Message: fmt.Sprintf("Queue %s paused: workers claim nothing from it until it is resumed; running handlers finish.", queue)}
		if !ran {
			f.Message = fmt.Sprintf("Queue %s was paused already; nothing changed.", queue)
		}
	} else {
		was, err := c.store.ResumeQueue(ctx, queue)
		if err != nil {
			c.dbFail(w, r, "resume the queue", err)
			return
		}
		f = flash{OK: was, Message: fmt.Sprintf("Queue %s resumed: workers claim from it again.", queue)}
		if !was {
			f.Message = fmt.Sprintf("Queue %s was not paused; nothing changed.", queue)
		}
	}
	c.log.Info("leasework console: action", "action", name, "queue", queue, "done", f.OK, "result", f.Message, "by", c.operator(r), "remote", r.RemoteAddr)
	c.redirect(w, r, PageQueues, f)
}

// limitAction sets (POST /limits/set, with the form's "max") or clears
// (POST /limits/clear) the limit of the form's "scope" and "name",
// recorded as set by the request's operator, and redirects to the queues
// page.
func (c *Console) limitAction(w http.ResponseWriter, r *http.Request) {
	var name ActionName
	switch r.PathValue("action") {
	case "set":
		name = ActionSetLimit
	case "clear":
		name = ActionClearLimit
	default:
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no limit action %q.", r.PathValue("action")))
		return
	}
	if !c.checkPost(w, r) {
		return
	}
	// The name as it is, white space included, as the store and the CLI
	// take it: the rows' forms carry it back exactly. (The form that sets
	// a limit by name asks the browser to refuse white space at its ends.)
	l := lease.Limit{Scope: r.PostForm.Get("scope"), Name: r.PostForm.Get("name")}
	// The default limit of the partitions is the partition limit of no
	// name, as the store names it: the form that sets it carries an empty
	// name; the form that sets a limit by name asks the browser for one.
	var err error
	switch l.Scope {
	case lease.ScopeKind:
		err = lease.ValidateKind(l.Name)
	case lease.ScopeQueue:
		err = lease.ValidateQueue(l.Name)
	case lease.ScopePartition:
		if l.Name != "" {
			err = lease.ValidatePartition(l.Name)
		}
	default:
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown scope %q: a limit is of a kind (in every queue), of a queue (of every kind) or of a partition.", l.Scope))
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Not a %s name: %s.", l.Scope, strings.TrimPrefix(err.Error(), "lease: ")))
		return
	}
	if name == ActionSetLimit {
		s := strings.TrimSpace(r.PostForm.Get("max"))
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > lease.MaxLimit {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a limit: give the most live attempts, a whole number from 0 (none starts) to %d.", s, lease.MaxLimit))
			return
		}
		l.Max = n
	}
	if err := c.authorize(r, Action{Name: name, Limit: l}); err != nil {
		c.refuse(w, r, err)
		return
	}
	by := c.operator(r)
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	if name == ActionSetLimit {
		old, err := c.store.SetLimit(ctx, l, by)
		if err != nil {
			c.dbFail(w, r, "set the limit", err)
			return
		}
		f = flash{OK: true, Message: setLimitMessage(l, old)}
	} else {
		was, err := c.store.ClearLimit(ctx, l.Scope, l.Name, by)
		if err != nil {
			c.dbFail(w, r, "clear the limit", err)
			return
		}
		f = flash{OK: was, Message: clearLimitMessage(l, was)}
	}
	c.log.Info("leasework console: action", "action", name, "scope", l.Scope, "name", l.Name, "max", l.Max,
		"done", f.OK, "result", f.Message, "by", by, "remote", r.RemoteAddr)
	c.redirect(w, r, PageQueues, f)
}

// rateLimitAction sets (POST /rate-limits/set, with the form's "rate",
// M/PERIOD as lease.ParseRate reads it) or clears (POST
// /rate-limits/clear) the rate limit of the form's "scope" (kind, queue
// or partition) and "name" (for a partition, empty for the default rate
// limit of the partitions), asking Authorize as for a concurrency limit
// (ActionSetLimit, ActionClearLimit), with Action.Rate set; then
// redirects to the queues page with a message saying what happened.
func (c *Console) rateLimitAction(w http.ResponseWriter, r *http.Request) {
	var name ActionName
	switch r.PathValue("action") {
	case "set":
		name = ActionSetLimit
	case "clear":
		name = ActionClearLimit
	default:
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no rate limit action %q.", r.PathValue("action")))
		return
	}
	if !c.checkPost(w, r) {
		return
	}
	// The name as it is, as limitAction takes it; the default rate limit
	// of the partitions is the partition rate limit of no name, as for
	// the concurrency limits.
	l := lease.RateLimit{Scope: r.PostForm.Get("scope"), Name: r.PostForm.Get("name")}
	var err error
	switch l.Scope {
	case lease.ScopeKind:
		err = lease.ValidateKind(l.Name)
	case lease.ScopeQueue:
		err = lease.ValidateQueue(l.Name)
	case lease.ScopePartition:
		if l.Name != "" {
			err = lease.ValidatePartition(l.Name)
		}
	default:
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown scope %q: a rate limit is of a kind (in every queue), of a queue (of every kind) or of a partition.", l.Scope))
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Not a %s name: %s.", l.Scope, strings.TrimPrefix(err.Error(), "lease: ")))
		return
	}
	if name == ActionSetLimit {
		s := strings.TrimSpace(r.PostForm.Get("rate"))
		l.Max, l.Per, err = lease.ParseRate(s)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Not a rate: %s. Write it as at most M starts per PERIOD, M/PERIOD: 100/1m, 5/500ms, 100/s.",
				strings.TrimPrefix(err.Error(), "lease: ")))
			return
		}
	}
	if err := c.authorize(r, Action{Name: name, Limit: lease.Limit{Scope: l.Scope, Name: l.Name, Max: l.Max}, Rate: true, Per: l.Per}); err != nil {
		c.refuse(w, r, err)
		return
	}
	by := c.operator(r)
	ctx, cancel := c.ctx(r)
	defer cancel()
	var f flash
	if name == ActionSetLimit {
		old, had, err := c.store.SetRateLimit(ctx, l, by)
		if err != nil {
			c.dbFail(w, r, "set the rate limit", err)
			return
		}
		f = flash{OK: true, Message: setRateLimitMessage(l, old, had)}
	} else {
		was, err := c.store.ClearRateLimit(ctx, l.Scope, l.Name, by)
		if err != nil {
			c.dbFail(w, r, "clear the rate limit", err)
			return
		}
		f = flash{OK: was, Message: clearRateLimitMessage(l, was)}
	}
	c.log.Info("leasework console: action", "action", name, "rate", true, "scope", l.Scope, "name", l.Name, "max", l.Max, "per", l.Per,
		"done", f.OK, "result", f.Message, "by", by, "remote", r.RemoteAddr)
	c.redirect(w, r, PageQueues, f)
}

// plural is one or many, by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// setLimitMessage says what setting l did, replacing old (-1: none).
func setLimitMessage(l lease.Limit, old int) string {
	was := "none"
	if old >= 0 {
		was = strconv.Itoa(old)
	}
	noun := "attempts"
	if l.Max == 1 {
		noun = "attempt"
	}
	msg := fmt.Sprintf("The limit of %s %s is %d live %s (was %s).", l.Scope, l.Name, l.Max, noun, was)
	if l.Scope == lease.ScopePartition && l.Name == "" {
		msg = fmt.Sprintf("The default limit of the partitions is %d live %s each (was %s): each partition without a limit of its own is held to it.", l.Max, noun, was)
	}
	switch {
	case l.Max == 0:
		msg += " None of its attempts starts until the limit is raised or cleared; those running finish."
	case old > l.Max:
		msg += fmt.Sprintf(" Attempts that held its slots past %d run on outside it until they end.", l.Max)
	}
	return msg
}

// clearLimitMessage says what clearing l did: was is whether there was
// such a limit.
func clearLimitMessage(l lease.Limit, was bool) string {
	switch {
	case l.Scope == lease.ScopePartition && l.Name == "" && was:
		return "The default limit of the partitions is cleared: those without a limit of their own are no longer limited; their events set aside come back as workers claim."
	case l.Scope == lease.ScopePartition && l.Name == "":
		return "There was no default limit of the partitions; nothing changed."
	case l.Scope == lease.ScopePartition && was:
		return fmt.Sprintf("The limit of partition %s is cleared: the default limit of the partitions applies to it, if one is set; its events set aside come back as workers claim.", l.Name)
	case was:
		return fmt.Sprintf("The limit of %s %s is cleared: workers claim its events as they have room.", l.Scope, l.Name)
	}
	return fmt.Sprintf("%s %s had no limit; nothing changed.", upper(l.Scope), l.Name)
}

// setRateLimitMessage says what setting l did, replacing old (had: there
// was one).
func setRateLimitMessage(l, old lease.RateLimit, had bool) string {
	was := "none"
	if had {
		was = fmt.Sprintf("%d per %v", old.Max, old.Per)
	}
	starts := plural(l.Max, "start", "starts")
	if l.Scope == lease.ScopePartition && l.Name == "" {
		return fmt.Sprintf("The default rate limit of the partitions is %d %s per %v each (was %s): each partition without a rate limit of its own is held to it, in a window of its own. The starts already in their windows stay counted.",
			l.Max, starts, l.Per, was)
	}
	return fmt.Sprintf("The rate limit of %s %s is %d %s per %v (was %s). The starts already in its window stay counted.", l.Scope, l.Name, l.Max, starts, l.Per, was)
}

// clearRateLimitMessage says what clearing l did: was is whether there
// was such a rate limit.
func clearRateLimitMessage(l lease.RateLimit, was bool) string {
	switch {
	case l.Scope == lease.ScopePartition && l.Name == "" && was:
		return "The default rate limit of the partitions is cleared: those without a rate limit of their own are no longer rate limited; the events it set aside come back as workers claim, as far as the limits left let them."
	case l.Scope == lease.ScopePartition && l.Name == "":
		return "There was no default rate limit of the partitions; nothing changed."
	case l.Scope == lease.ScopePartition && was:
		return fmt.Sprintf("The rate limit of partition %s is cleared: the default rate limit of the partitions applies to it, if one is set; the events it set aside come back as workers claim, as far as the limits left let them.", l.Name)
	case l.Scope == lease.ScopePartition:
		return fmt.Sprintf("Partition %s had no rate limit of its own; nothing changed.", l.Name)
	case was:
		return fmt.Sprintf("The rate limit of %s %s is cleared: workers claim its events as they have room.", l.Scope, l.Name)
	}
	return fmt.Sprintf("%s %s had no rate limit; nothing changed.", upper(l.Scope), l.Name)
}

// upper returns s with its first letter upper case: "kind" as "Kind".
func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
