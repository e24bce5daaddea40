package history

import (
	"sort"
	"strings"
	"time"
)

// checkTerminal checks that every acknowledged enqueue exists, and that
// every row ends in one terminal state, written at its last claim's
// generation by that claim, and the one its payload asked for.
func (c *checker) checkTerminal() {
	for _, e := range c.h.Enqueues {
		if !e.Acked {
			continue
		}
		for _, ev := range e.Events {
			if r := c.byEvent[ev.EventID]; r == nil || r.insert == nil {
				c.fail(Terminal, nil, "the acknowledged enqueue of %s (called at %s, returned at %s) is lost: the history has no row of it",
					ev.EventID, ts(e.Invoked), ts(e.Returned))
			}
		}
	}
	for _, r := range c.ordered {
		if r.insert == nil {
			continue // owners reported it
		}
		c.v.Checked[Terminal]++
		if len(r.terms) == 0 {
			if c.h.Settled.IsZero() || r.insert.At.Before(c.h.Settled) {
				c.fail(Terminal, r, "never finished: it ends %s", r.final())
			}
			continue
		}
		t := r.terms[0] // a second one is reported as a write to a finished row
		last := r.lastClaimBefore(t.Seq)
		switch t.New.Status {
		case Done:
			switch {
			case last == nil:
				c.fail(Terminal, r, "DONE by %s (audit %d) without a claim", t.Writer, t.Seq)
			case t.New.Generation != last.New.Generation || t.Writer != last.New.Worker:
				c.fail(Terminal, r, "DONE at generation %d by %s; its last claim was generation %d by %s",
					t.New.Generation, t.Writer, last.New.Generation, last.New.Worker)
			default:
				if run := r.runOf(last.New.Generation, last.New.Worker); run == nil {
					c.fail(Terminal, r, "DONE at generation %d, whose handler in %s never ran", last.New.Generation, last.New.Worker)
				} else if run.Result != ResultOK {
					c.fail(Terminal, r, "DONE at generation %d, whose handler in %s returned %s", last.New.Generation, last.New.Worker, describeResult(run))
				}
			}
		case Failed:
			switch {
			case last == nil:
				c.fail(Terminal, r, "FAILED by %s (audit %d) without a claim", t.Writer, t.Seq)
			case t.New.Generation != last.New.Generation:
				c.fail(Terminal, r, "FAILED at generation %d; its last claim was generation %d", t.New.Generation, last.New.Generation)
			case !exhausted(t) && t.Writer != last.New.Worker:
				c.fail(Terminal, r, "FAILED by %s; its last claim was %s's", t.Writer, last.New.Worker)
			}
		case Discarded:
			switch {
			case containsWrite(r.cancels, t):
				if !c.cancelReturned(r, t.New.Generation, false) {
					c.fail(Terminal, r, "DISCARDED at generation %d by a cancel that no cancel call of the test returned", t.New.Generation)
				}
			case containsWrite(r.stops, t):
				if !c.cancelReturned(r, t.Old.Generation, true) {
					c.fail(Terminal, r, "DISCARDED at generation %d, stopping generation %d, which no cancel call of the test returned", t.New.Generation, t.Old.Generation)
				}
			default:
				c.fail(Terminal, r, "DISCARDED by %s (audit %d), not by a cancel", t.Writer, t.Seq)
			}
			if last != nil && t.New.Generation <= last.New.Generation {
				c.fail(Terminal, r, "DISCARDED at generation %d, not above its last claim's %d", t.New.Generation, last.New.Generation)
			}
		}
		want, final := cmpOr(c.wanted[r.eventID], Done), t.New.Status
		switch {
		case final == want && final == Failed && !exhausted(t):
			if run := r.runOf(t.New.Generation, t.Writer); run != nil && run.Result != ResultFail && !c.spent(r, t) {
				c.fail(Terminal, r, "FAILED, as its payload asked, but its handler returned %s", describeResult(run))
			}
		case final == want, final == Discarded:
		case final == Failed && want == Done && c.spent(r, t):
			// A budget was spent: the snoozes and retries properties
			// judge whether it was.
		default:
			c.fail(Terminal, r, "ended %s (audit %d by %s, last error %q); its payload asked for %s", final, t.Seq, t.Writer, t.New.LastError, want)
		}
	}
}

// spent reports whether FAILED write t ended the row on a spent budget:
// a claim found it spent, or the claimant's handler returned a retryable
// error.
func (c *checker) spent(r *row, t *Write) bool {
	if exhausted(t) {
		return true
	}
	run := r.runOf(t.Old.Generation, t.Writer)
	return run != nil && (run.Result == ResultError || run.Result == ResultRetryAfter)
}

// exhausted reports whether w is the claim statement's end of a row whose
// lease expired on its last allowed attempt.
func exhausted(w *Write) bool {
	return w.Old.Status == InProgress && w.New.Status == Failed && w.New.Generation == w.Old.Generation &&
		!w.Old.LeaseUntil.After(w.Stmt) && w.Old.Attempt >= w.Old.MaxAttempts
}

func (r *row) lastClaimBefore(seq int64) *Write {
	var last *Write
	for _, cl := range r.claims {
		if cl.Seq < seq {
			last = cl
		}
	}
	return last
}

// runOf returns the run of generation gen in worker (any worker when
// empty), or nil.
func (r *row) runOf(gen int64, worker string) *Run {
	for _, run := range r.runs {
		if run.Generation == gen && (worker == "" || run.Worker == worker) {
			return run
		}
	}
	return nil
}

func containsWrite(ws []*Write, w *Write) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// cancelReturned reports whether a cancel call of the test returned gen
// for r's event (stopping: as the generation of the attempt it marked),
// or failed leaving it unknown.
func (c *checker) cancelReturned(r *row, gen int64, stopping bool) bool {
	for _, cn := range c.h.Cancels {
		if cn.EventID == r.eventID && (cn.Result == CancelUnknown || (cn.Result == CancelOK && cn.Generation == gen && cn.Stopping == stopping)) {
			return true
		}
	}
	return false
}

func describeResult(run *Run) string {
	switch {
	case run.End.IsZero():
		return "nothing (no end recorded)"
	case run.Err != "":
		return run.Result + " (" + run.Err + ")"
	}
	return run.Result
}

// checkEffects checks the business effects of Transactional kinds: one
// per DONE event, the final claim's, in the completion's transaction; none
// for any other end.
func (c *checker) checkEffects() {
	for _, r := range c.ordered {
		if !c.h.Kinds[r.kind].Transactional {
			continue
		}
		var done *Write
		if len(r.terms) > 0 && r.terms[0].New.Status == Done {
			done = r.terms[0]
		}
		if done == nil {
			for _, e := range r.effects {
				c.fail(Effects, r, "ended %s, yet a business effect of generation %d by %s committed", r.final(), e.Generation, e.Worker)
			}
			continue
		}
		c.v.Checked[Effects]++
		if len(r.effects) != 1 {
			c.fail(Effects, r, "DONE at generation %d with %d business effects; want exactly one", done.New.Generation, len(r.effects))
		}
		for _, e := range r.effects {
			switch {
			case e.Generation != done.New.Generation || e.Worker != done.Writer:
				c.fail(Effects, r, "a business effect of generation %d by %s committed; the event is DONE at generation %d by %s: a stale owner's effect",
					e.Generation, e.Worker, done.New.Generation, done.Writer)
			case e.Txid != done.Txid:
				c.fail(Effects, r, "its business effect committed in transaction %d, its completion in transaction %d", e.Txid, done.Txid)
			}
		}
	}
	for i := range c.h.Effects {
		e := &c.h.Effects[i]
		if r := c.rows[e.Row]; r == nil || r.insert == nil {
			c.fail(Effects, nil, "a business effect of row %d (%s) generation %d by %s, a row the history does not have", e.Row, e.EventID, e.Generation, e.Worker)
		}
	}
}

// checkCancels checks the test's cancels against what they wrote.
func (c *checker) checkCancels() {
	var ranOn time.Duration
	for _, cn := range c.h.Cancels {
		r := c.byEvent[cn.EventID]
		if r == nil {
			if cn.Result != CancelUnknown {
				c.fail(Cancels, nil, "cancel of %s at %s returned %s; the history has no row of it", cn.EventID, ts(cn.Invoked), cn.Result)
			}
			continue
		}
		switch cn.Result {
		case CancelOK:
			var w *Write
			writes := r.cancels
			if cn.Stopping {
				writes = r.marks
			}
			for _, x := range writes {
				if x.New.Generation == cn.Generation {
					w = x
				}
			}
			if w == nil {
				c.fail(Cancels, r, "the cancel called at %s returned generation %d (stopping %v); the history has no cancel write of it", ts(cn.Invoked), cn.Generation, cn.Stopping)
				continue
			}
			c.v.Checked[Cancels]++
			c.v.Figures["cancelled_"+strings.ToLower(w.Old.Status)]++
			// A cancel of a row marked already finds the earlier mark.
			if (w.At.Before(cn.Invoked) && !cn.Stopping) || w.At.After(cn.Returned) {
				c.fail(Cancels, r, "cancel write at %s, outside its call (%s to %s)", ts(w.At), ts(cn.Invoked), ts(cn.Returned))
			}
			for _, later := range r.writes {
				// After a mark, only the expiry fixture and the row's
				// stop; after a cancel that ended the row, nothing.
				if later.Seq > w.Seq && !(cn.Stopping && (containsWrite(r.stops, later) || c.isFixture(later))) {
					c.fail(Cancels, r, "audit %d by %s wrote %s after the cancel (audit %d)", later.Seq, later.Writer, describe(later.New), w.Seq)
				}
			}
			if cn.Stopping && len(r.stops) == 0 && (c.h.Settled.IsZero() || r.insert == nil || r.insert.At.Before(c.h.Settled)) {
				c.fail(Cancels, r, "cancelled at %s while generation %d ran, and never stopped: it ends %s", ts(w.At), w.Old.Generation, r.final())
			}
			if w.Old.Status != InProgress {
				continue
			}
			g := w.Old.Generation
			for _, e := range r.effects {
				if e.Generation == g {
					c.fail(Cancels, r, "the attempt cancelled at %s (generation %d, %s) committed its business effect", ts(w.At), g, e.Worker)
				}
			}
			if run := r.runOf(g, w.Old.Worker); run != nil {
				if end := c.endOf(run); !end.IsZero() && end.Sub(w.At) > ranOn {
					ranOn = end.Sub(w.At)
				}
			}
		case CancelFinished:
			if len(r.terms) == 0 || !r.terms[0].At.Before(cn.Returned) {
				c.fail(Cancels, r, "the cancel called at %s found it finished; it was not finished by then (it ends %s)", ts(cn.Invoked), r.final())
			}
			for _, w := range append(append([]*Write(nil), r.cancels...), r.marks...) {
				if !w.At.Before(cn.Invoked) && !w.At.After(cn.Returned) {
					c.fail(Cancels, r, "the cancel called at %s found it finished, yet wrote generation %d", ts(cn.Invoked), w.New.Generation)
				}
			}
		case CancelUnknown:
		default:
			c.fail(Cancels, r, "cancel called at %s has an unknown result %q", ts(cn.Invoked), cn.Result)
		}
	}
	c.v.Figures["cancelled_ran_on_ms"] = int(ranOn / time.Millisecond)
}

// isFixture reports whether w is the operator's expiry fixture: it moves
// the lease of an INPROGRESS row and nothing else.
func (c *checker) isFixture(w *Write) bool {
	moved := w.Old
	moved.LeaseUntil = w.New.LeaseUntil
	return c.operators[w.Writer] && w.Old.Status == InProgress && sameState(w.New, moved)
}

// checkTicks checks each schedule's firings: the event id of its fire
// time, on the grid, one row per tick.
func (c *checker) checkTicks() {
	for _, s := range c.h.Schedules {
		byFire := map[int64][]*row{}
		for _, r := range c.ordered {
			if r.kind != s.Kind || r.insert == nil {
				continue
			}
			c.v.Checked[Ticks]++
			fire := r.insert.New.NextAttempt
			rest, ok := strings.CutPrefix(r.eventID, s.Name+":")
			named, err := time.Parse(time.RFC3339, rest)
			switch {
			case !ok || err != nil:
				c.fail(Ticks, r, "a firing of schedule %q whose event id is not the schedule's name and a fire time", s.Name)
			case !named.Equal(fire):
				c.fail(Ticks, r, "a firing of schedule %q whose event id names %s, its run time %s", s.Name, named.UTC().Format(time.RFC3339), fire.UTC().Format(time.RFC3339Nano))
			}
			if s.Every > 0 && fire.UnixNano()%int64(s.Every) != 0 {
				c.fail(Ticks, r, "a firing of schedule %q at %s, not on its grid of %v", s.Name, fire.UTC().Format(time.RFC3339Nano), s.Every)
			}
			byFire[fire.UnixNano()] = append(byFire[fire.UnixNano()], r)
		}
		fires := make([]int64, 0, len(byFire))
		for f := range byFire {
			fires = append(fires, f)
		}
		sort.Slice(fires, func(i, j int) bool { return fires[i] < fires[j] })
		for _, f := range fires {
			if rows := byFire[f]; len(rows) > 1 {
				var ids []string
				for _, r := range rows {
					ids = append(ids, r.eventID)
				}
				c.fail(Ticks, nil, "schedule %q fired %d times for its tick at %s: %s", s.Name, len(rows),
					time.Unix(0, f).UTC().Format(time.RFC3339), strings.Join(ids, ", "))
			}
		}
		if len(fires) > 1 && s.Every > 0 {
			c.v.Figures["ticks_missed"] += int((fires[len(fires)-1]-fires[0])/int64(s.Every)) + 1 - len(fires)
		}
	}
}

// checkBudgets checks, row by row in commit order, what the handlers'
// results made of the budgets: snoozes grow the row's budget and spend no
// budget; retries wait the delay asked or the policy's.
func (c *checker) checkBudgets() {
	for _, r := range c.ordered {
		outs := make([]*Write, 0, len(r.outcome))
		for _, w := range r.outcome {
			outs = append(outs, w)
		}
		sort.Slice(outs, func(i, j int) bool { return outs[i].Seq < outs[j].Seq })
		pol := c.h.Kinds[r.kind].Policy
		snoozes, failures := 0, 0
		for _, w := range outs {
			o, n := w.Old, w.New
			if exhausted(w) {
				if spent := o.Attempt - snoozes; spent < r.origMax {
					c.fail(Snoozes, r, "ended FAILED on a spent budget after %d attempts, %d of them snoozes: only %d of its budget of %d were spent",
						o.Attempt, snoozes, spent, r.origMax)
				}
				continue
			}
			run := r.runOf(o.Generation, w.Writer)
			if run == nil || run.End.IsZero() {
				continue
			}
			delay := n.NextAttempt.Sub(w.Stmt)
			switch run.Result {
			case ResultSnooze:
				c.v.Checked[Snoozes]++
				snoozes++
				if n.Status != Ready || n.MaxAttempts != o.MaxAttempts+1 || n.Attempt != o.Attempt || !near(delay, run.Delay) {
					c.fail(Snoozes, r, "snoozed for %v at attempt %d (generation %d); written %s, budget %d→%d, due %v later: a snooze goes back to READY after its delay and grows the budget by one",
						run.Delay, o.Attempt, o.Generation, n.Status, o.MaxAttempts, n.MaxAttempts, delay)
				}
			case ResultError, ResultRetryAfter:
				if n.Status == Ready && n.Attempt == o.Attempt-1 {
					continue // released at shutdown
				}
				k := o.Attempt - snoozes // attempts so far that were not snoozes
				switch n.Status {
				case Ready:
					c.v.Checked[Retries]++
					failures++
					c.checkDelay(r, w, run, pol, delay, failures, k)
					if n.MaxAttempts != o.MaxAttempts {
						c.fail(Retries, r, "the retry after attempt %d changed the budget %d→%d", o.Attempt, o.MaxAttempts, n.MaxAttempts)
					}
				case Failed:
					capped := pol != nil && pol.MaxAttempts > 0
					switch {
					case o.Attempt >= o.MaxAttempts:
						if k < r.origMax {
							c.fail(Snoozes, r, "ended FAILED on a spent budget at attempt %d, %d of them snoozes: only %d of its budget of %d were spent",
								o.Attempt, snoozes, k, r.origMax)
						}
					case capped && k >= pol.MaxAttempts:
					case capped && o.Attempt >= pol.MaxAttempts:
						c.fail(Snoozes, r, "ended FAILED by the retry policy's cap of %d attempts at attempt %d, %d of them snoozes: the snoozes spent the policy's budget",
							pol.MaxAttempts, o.Attempt, snoozes)
					default:
						c.fail(Retries, r, "ended FAILED on a retryable error (%s) at attempt %d with budget left (row %d, policy %d)",
							run.Err, o.Attempt, o.MaxAttempts, policyCap(pol))
					}
				}
			}
		}
		c.countReruns(r)
	}
}

// checkDelay checks a retry's delay: the handler's, for RetryAfter; the
// policy's for failure n, where n is at least the failures recorded and
// at most the attempts that were not snoozes (crashed attempts count as
// failures or not, as the runtime likes).
func (c *checker) checkDelay(r *row, w *Write, run *Run, pol *Policy, delay time.Duration, failures, k int) {
	if run.Result == ResultRetryAfter {
		if !near(delay, run.Delay) {
			c.fail(Retries, r, "retried %v after attempt %d, whose handler asked for %v (RetryAfter)", delay, w.Old.Attempt, run.Delay)
		}
		return
	}
	if pol == nil {
		return
	}
	for n := failures; n <= max(k, failures); n++ {
		if near(delay, pol.Delay(n)) {
			return
		}
	}
	c.fail(Retries, r, "retried %v after attempt %d (failure %d, %d attempts not snoozes); the policy's delay is %v",
		delay, w.Old.Attempt, failures, k, pol.Delay(failures))
}

// countReruns counts the runs that returned nil whose completion was
// never written, after which the event ran again, and the runs that
// returned nil beyond an event's first (deliveries beyond the first).
func (c *checker) countReruns(r *row) {
	ok := 0
	for _, run := range r.runs {
		if run.Result == ResultOK {
			ok++
		}
	}
	c.v.Figures["duplicates"] += max(ok-1, 0)
	for _, run := range r.runs {
		if run.Result != ResultOK || r.outcome[run.Generation] != nil {
			continue
		}
		if len(r.terms) > 0 && r.terms[0].New.Status == Done && r.terms[0].New.Generation == run.Generation {
			continue // completed in its own transaction
		}
		next := r.claimAfter(run.Generation)
		if next == nil {
			continue
		}
		c.v.Figures["reruns"]++
		if !c.faulted(run.Worker, c.endOf(run), next.Stmt) {
			c.v.Figures["reruns_outside_faults"]++
		}
	}
}

// claimAfter returns the first claim of a generation after gen, or nil.
func (r *row) claimAfter(gen int64) *Write {
	for _, cl := range r.claims {
		if cl.New.Generation > gen {
			return cl
		}
	}
	return nil
}

// faulted reports whether a fault's window, of worker or of every worker,
// meets [from, to] (from is at most to: a run that ended after the next
// claim lost its lease while it ran).
func (c *checker) faulted(worker string, from, to time.Time) bool {
	if from.IsZero() || from.After(to) {
		from = to
	}
	for _, f := range c.h.Faults {
		if (f.Worker == "" || f.Worker == worker) && !f.Start.After(to) && (f.End.IsZero() || !f.End.Before(from)) {
			return true
		}
	}
	return false
}

func policyCap(p *Policy) int {
	if p == nil {
		return 0
	}
	return p.MaxAttempts
}

// near reports whether two delays agree to the database's microsecond.
func near(a, b time.Duration) bool {
	d := a - b
	return d >= -time.Microsecond && d <= time.Microsecond
}

// checkPauses checks that no claim of a paused queue started while it was
// paused: a claim whose statement began after the pause returned (Stmt)
// and whose write was made before the resume was called (At). A claim
// reads the queue's state in its snapshot, taken after its statement began
// (a busy server may plan it for tens of milliseconds first), so a claim
// begun before the resume was called may rightly see it, and write after.
func (c *checker) checkPauses() {
	for _, p := range c.h.Pauses {
		c.v.Checked[Pauses]++
		for _, r := range c.ordered {
			if r.queue != p.Queue {
				continue
			}
			for _, cl := range r.claims {
				if cl.Stmt.After(p.Paused) && (p.Resumed.IsZero() || cl.At.Before(p.Resumed)) {
					c.fail(Pauses, r, "claimed by %s at %s (written at %s) while queue %q was paused (from %s to %s)",
						cl.Writer, ts(cl.Stmt), ts(cl.At), p.Queue, ts(p.Paused), ts(p.Resumed))
				}
			}
		}
	}
}
