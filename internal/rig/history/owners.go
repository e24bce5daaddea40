package history

import (
	"fmt"
	"time"
)

// replay walks one row's writes in commit order, checks each against the
// state the one before left (owners), classifies it, and records what the
// later checks need: claims, leases, outcomes, terminal writes.
func (c *checker) replay(r *row) {
	var cur State
	have := false
	for _, w := range r.writes {
		switch w.Op {
		case Insert:
			if have {
				c.fail(Owners, r, "inserted again by %s (audit %d)", w.Writer, w.Seq)
			}
			cur, have = w.New, true
			r.insert, r.origMax = w, w.New.MaxAttempts
			if w.New.KeySeq != 0 {
				r.keySeq = w.New.KeySeq
			}
			continue
		case Update, Delete:
		default:
			c.fail(Owners, r, "audit %d has an unknown operation %q", w.Seq, w.Op)
			continue
		}
		if !have {
			c.fail(Owners, r, "the history has no insert of the row before audit %d by %s", w.Seq, w.Writer)
			cur, have = w.Old, true
		}
		if !sameState(w.Old, cur) {
			c.fail(Owners, r, "a gap in the history: audit %d by %s found the row %s, the history left it %s",
				w.Seq, w.Writer, describe(w.Old), describe(cur))
		}
		if w.Op == Delete {
			if !isTerminal(w.Old.Status) {
				c.fail(Terminal, r, "deleted by %s (audit %d) while %s", w.Writer, w.Seq, w.Old.Status)
			}
			r.deleted = true
			continue
		}
		c.classify(r, w)
		cur = w.New
	}
}

// classify checks one update against the rules for its kind of write.
func (c *checker) classify(r *row, w *Write) {
	o, n := w.Old, w.New
	op := c.operators[w.Writer]
	if isTerminal(n.Status) && !isTerminal(o.Status) {
		r.terms = append(r.terms, w)
	}
	switch {
	case isTerminal(o.Status):
		c.fail(Terminal, r, "audit %d by %s changed a finished row: %s became %s", w.Seq, w.Writer, describe(o), describe(n))

	case n.Generation != o.Generation && op:
		// A cancel: the operator's repair that ends the row.
		if n.Status != Discarded || n.Generation < o.Generation {
			c.fail(Owners, r, "audit %d: the operator %s changed the generation %d→%d without cancelling (%s)",
				w.Seq, w.Writer, o.Generation, n.Generation, n.Status)
		}
		r.cancels = append(r.cancels, w)
		if o.Status == InProgress && !o.CancelledAt.IsZero() {
			// A cancel of a row marked already, whose lease has run
			// out: it ends the row, as a claim would.
			c.stop(r, w)
		}

	case n.Generation != o.Generation && o.Status == InProgress && !o.CancelledAt.IsZero() && n.Status != InProgress:
		c.stop(r, w)

	case n.Generation != o.Generation:
		c.claim(r, w)

	case o.Status == InProgress:
		c.ownerWrite(r, w, op)

	case o.Status == Ready && n.Status == Waiting && o.KeySeq == n.KeySeq && sameState(n, withStatusOf(o, Waiting)):
		c.setAside(r, w, op)

	case o.Status == Ready || o.Status == Waiting:
		// Commit-time order of a key (its place, and WAITING behind a
		// live row), the promotion of a key's next row, or a write that
		// changes nothing this checker follows. Nothing else may change
		// a row nobody owns.
		ordered := o.KeySeq == 0 && n.KeySeq != 0 && n.Status != InProgress && !isTerminal(n.Status)
		promoted := o.Status == Waiting && n.Status == Ready && o.KeySeq == n.KeySeq
		unchanged := o.Status == n.Status && o.KeySeq == n.KeySeq && o.Attempt == n.Attempt && o.MaxAttempts == n.MaxAttempts &&
			o.Worker == n.Worker && o.LeaseUntil.Equal(n.LeaseUntil)
		switch {
		case ordered:
			r.keySeq = n.KeySeq
		case promoted, unchanged:
		default:
			c.fail(Owners, r, "audit %d by %s changed a row nobody owned: %s became %s", w.Seq, w.Writer, describe(o), describe(n))
		}

	default:
		c.fail(Owners, r, "audit %d by %s: %s became %s", w.Seq, w.Writer, describe(o), describe(n))
	}
}

// claim checks a write that changed the generation: a claim.
func (c *checker) claim(r *row, w *Write) {
	o, n := w.Old, w.New
	c.v.Checked[Owners]++
	if n.Status != InProgress {
		c.fail(Owners, r, "audit %d by %s changed the generation %d→%d without claiming (%s)", w.Seq, w.Writer, o.Generation, n.Generation, n.Status)
		return
	}
	if n.Generation < o.Generation {
		c.fail(Owners, r, "claim by %s (audit %d) lowered the generation %d→%d", w.Writer, w.Seq, o.Generation, n.Generation)
	}
	if n.Worker != w.Writer {
		c.fail(Owners, r, "claim of generation %d names %q as its claimant but was written by %s", n.Generation, n.Worker, w.Writer)
	}
	if n.Attempt != o.Attempt+1 {
		c.fail(Owners, r, "claim of generation %d by %s counts attempt %d after %d", n.Generation, w.Writer, n.Attempt, o.Attempt)
	}
	switch o.Status {
	case Ready:
		if o.NextAttempt.After(w.Stmt) {
			c.fail(Owners, r, "claimed by %s at %s, before it was due at %s", w.Writer, ts(w.Stmt), ts(o.NextAttempt))
		}
	case InProgress:
		if !o.CancelledAt.IsZero() {
			c.fail(Cancels, r, "claimed again by %s at %s (generation %d) after it was cancelled at %s", w.Writer, ts(w.Stmt), n.Generation, ts(o.CancelledAt))
		}
		if o.LeaseUntil.After(w.Stmt) {
			c.fail(Owners, r, "claimed by %s at %s (generation %d) while %s's lease of generation %d ran until %s: two live owners",
				w.Writer, ts(w.Stmt), n.Generation, o.Worker, o.Generation, ts(o.LeaseUntil))
		}
	case Waiting:
		// Only the completion of the key's previous row may claim it,
		// in the same transaction (a turn taken): checkKeyOrder. A
		// keyless row is WAITING only set aside by its partition's
		// limit, and a claim that finds room in the partition may take
		// it so, with its place.
		if r.key == "" && len(r.setAside) == 0 {
			c.fail(Partitions, r, "claimed by %s at %s from WAITING, never set aside", w.Writer, ts(w.Stmt))
		}
	default:
		c.fail(Owners, r, "claimed by %s at %s from %s", w.Writer, ts(w.Stmt), o.Status)
	}
	if !n.LeaseUntil.After(w.Stmt) {
		c.fail(Owners, r, "claim by %s at %s gave a lease already over (%s)", w.Writer, ts(w.Stmt), ts(n.LeaseUntil))
	}
	if prev := r.claimOf[n.Generation]; prev != nil {
		c.fail(Owners, r, "generation %d claimed twice: by %s (audit %d) and by %s (audit %d)", n.Generation, prev.Writer, prev.Seq, w.Writer, w.Seq)
	}
	r.claims = append(r.claims, w)
	r.claimOf[n.Generation] = w
	r.leaseEnd[n.Generation] = n.LeaseUntil
}

// stop checks the end of a row marked cancelled while an attempt ran it:
// DISCARDED at a new generation, by the attempt's owner while its lease
// runs (its acknowledged stop), or by a claim or a cancel once the lease
// has ended.
func (c *checker) stop(r *row, w *Write) {
	o, n := w.Old, w.New
	owner := w.Writer == o.Worker && o.LeaseUntil.After(w.Stmt)
	switch {
	case n.Status != Discarded || n.Generation < o.Generation || !n.LeaseUntil.IsZero():
		c.fail(Owners, r, "audit %d by %s: a row marked cancelled became %s; want DISCARDED at a new generation", w.Seq, w.Writer, describe(n))
	case c.operators[w.Writer] && o.LeaseUntil.After(w.Stmt):
		c.fail(Cancels, r, "audit %d: the operator %s ended a row marked cancelled while generation %d's lease ran until %s", w.Seq, w.Writer, o.Generation, ts(o.LeaseUntil))
	case !owner && o.LeaseUntil.After(w.Stmt):
		c.fail(Cancels, r, "audit %d: %s ended generation %d, marked cancelled, at %s while %s's lease ran until %s: the attempt may still run",
			w.Seq, w.Writer, o.Generation, ts(w.Stmt), o.Worker, ts(o.LeaseUntil))
	}
	r.stops = append(r.stops, w)
}

// ownerWrite checks a write to an INPROGRESS row that keeps its
// generation: a renewal or an outcome by its claimant, a claim that found
// the row's budget spent, the operator's lease fixture, or a cancel's mark.
func (c *checker) ownerWrite(r *row, w *Write, op bool) {
	o, n := w.Old, w.New
	exhausted := n.Status == Failed && !o.LeaseUntil.After(w.Stmt) && o.Attempt >= o.MaxAttempts
	switch {
	case exhausted:
		if !o.CancelledAt.IsZero() {
			c.fail(Cancels, r, "audit %d: a row marked cancelled ended FAILED on a spent budget, not DISCARDED", w.Seq)
		}
		r.outcome[o.Generation] = w
		return
	case !op && placeTaken(o, n):
		// A sweep may take the places of an attempt only once its lease
		// has run out: until then the attempt is live, and counts.
		if o.LeaseUntil.After(w.Stmt) {
			c.fail(Owners, r, "audit %d: %s took the places of generation %d under its limits at %s, while %s's lease ran until %s",
				w.Seq, w.Writer, o.Generation, ts(w.Stmt), o.Worker, ts(o.LeaseUntil))
		}
		return
	case op:
		// The expiry fixture moves lease_until, and nothing else; a
		// cancel's mark sets cancelled_at and the last error.
		moved := o
		moved.LeaseUntil = n.LeaseUntil
		marked := o
		marked.CancelledAt, marked.LastError = n.CancelledAt, n.LastError
		switch {
		case sameState(n, moved):
			r.leaseEnd[o.Generation] = n.LeaseUntil
		case o.CancelledAt.IsZero() && !n.CancelledAt.IsZero() && sameState(n, marked):
			r.marks = append(r.marks, w)
		default:
			c.fail(Owners, r, "audit %d: the operator %s wrote %s over %s's claim of generation %d: %s",
				w.Seq, w.Writer, describe(n), o.Worker, o.Generation, describe(o))
		}
		return
	}
	if !o.CancelledAt.IsZero() {
		c.fail(Cancels, r, "audit %d: %s's write %s of generation %d was accepted after its event was cancelled at %s",
			w.Seq, w.Writer, describe(n), o.Generation, ts(o.CancelledAt))
	}
	if w.Writer != o.Worker {
		c.fail(Owners, r, "audit %d: %s wrote %s over the claim of generation %d held by %s: a write from a session not the claimant",
			w.Seq, w.Writer, describe(n), o.Generation, o.Worker)
	}
	if !o.LeaseUntil.After(w.Stmt) {
		c.fail(Owners, r, "audit %d: %s wrote %s at %s, after the lease of generation %d ended at %s",
			w.Seq, w.Writer, describe(n), ts(w.Stmt), o.Generation, ts(o.LeaseUntil))
	}
	switch n.Status {
	case InProgress: // a renewal (or a progress write)
		if n.Worker != o.Worker || n.Attempt != o.Attempt || n.MaxAttempts != o.MaxAttempts {
			c.fail(Owners, r, "audit %d: renewal by %s changed more than the lease: %s became %s", w.Seq, w.Writer, describe(o), describe(n))
		}
		if !n.LeaseUntil.After(w.Stmt) {
			c.fail(Owners, r, "audit %d: renewal by %s gave a lease already over (%s)", w.Seq, w.Writer, ts(n.LeaseUntil))
		}
		r.leaseEnd[o.Generation] = n.LeaseUntil
	case Done, Ready, Failed:
		if prev := r.outcome[o.Generation]; prev != nil {
			c.fail(Owners, r, "two outcomes of generation %d: audit %d and %d", o.Generation, prev.Seq, w.Seq)
		}
		r.outcome[o.Generation] = w
	default:
		c.fail(Owners, r, "audit %d: %s moved its claim of generation %d to %s", w.Seq, w.Writer, o.Generation, n.Status)
	}
}

// checkRuns checks the runs of one row: each under a claim of its worker,
// started after it, and no two live at once.
func (c *checker) checkRuns(r *row) {
	var (
		prev    *Run // the run, of those started before, live the longest
		prevEnd time.Time
		seen    = map[int64]*Run{}
	)
	for _, run := range r.runs {
		if other := seen[run.Generation]; other != nil {
			c.fail(Owners, r, "two runs of generation %d: in %s from %s and in %s from %s",
				run.Generation, other.Worker, ts(other.Start), run.Worker, ts(run.Start))
		}
		seen[run.Generation] = run
		claim := r.claimOf[run.Generation]
		switch {
		case claim == nil:
			c.fail(Owners, r, "a handler ran in %s from %s for generation %d, which no claim in the history gave", run.Worker, ts(run.Start), run.Generation)
		case claim.New.Worker != run.Worker:
			c.fail(Owners, r, "a handler ran in %s for generation %d, which %s claimed", run.Worker, run.Generation, claim.New.Worker)
		case run.Start.Before(claim.Stmt):
			c.fail(Owners, r, "the handler of generation %d started at %s, before its claim at %s", run.Generation, ts(run.Start), ts(claim.Stmt))
		}
		end := c.liveEnd(r, run)
		if !after(end, run.Start) {
			continue // its lease had ended before it started: never live (a stopped worker's, resumed)
		}
		if prev != nil && after(prevEnd, run.Start) {
			c.fail(Owners, r, "two live owners at %s: the handler of generation %d in %s started while that of generation %d in %s (from %s) was live until %s",
				ts(run.Start), run.Generation, run.Worker, prev.Generation, prev.Worker, ts(prev.Start), ts(prevEnd))
		}
		if prev == nil || after(end, prevEnd) {
			prev, prevEnd = run, end
		}
	}
}

// describe formats a state for a violation's text.
func describe(s State) string {
	if sameState(s, State{}) {
		return "(none)"
	}
	d := fmt.Sprintf("%s gen %d attempt %d/%d", s.Status, s.Generation, s.Attempt, s.MaxAttempts)
	if s.Worker != "" {
		d += " worker " + s.Worker
	}
	if !s.LeaseUntil.IsZero() {
		d += " lease until " + ts(s.LeaseUntil)
	}
	if s.KeySeq != 0 {
		d += fmt.Sprintf(" key_seq %d", s.KeySeq)
	}
	return d
}

// sameState compares two states, their times as instants.
func sameState(a, b State) bool {
	return a.Status == b.Status && a.Generation == b.Generation && a.Attempt == b.Attempt &&
		a.MaxAttempts == b.MaxAttempts && a.LeaseUntil.Equal(b.LeaseUntil) && a.NextAttempt.Equal(b.NextAttempt) &&
		a.Worker == b.Worker && a.KeySeq == b.KeySeq && a.LastError == b.LastError && a.CancelledAt.Equal(b.CancelledAt) &&
		a.KindSlot == b.KindSlot && a.QueueSlot == b.QueueSlot && a.PartitionSlot == b.PartitionSlot
}

// withStatusOf returns s with status st.
func withStatusOf(s State, st string) State {
	s.Status = st
	return s
}

// placeTaken says whether n is o with some of its limits' places (its
// kind's, its queue's, its partition's) cleared, and nothing else
// changed: a sweep that took the places of an attempt whose lease ran
// out.
func placeTaken(o, n State) bool {
	cleared := o
	cleared.KindSlot, cleared.QueueSlot, cleared.PartitionSlot = n.KindSlot, n.QueueSlot, n.PartitionSlot
	return sameState(n, cleared) && !sameState(n, o) &&
		(n.KindSlot == 0 || n.KindSlot == o.KindSlot) && (n.QueueSlot == 0 || n.QueueSlot == o.QueueSlot) &&
		(n.PartitionSlot == 0 || n.PartitionSlot == o.PartitionSlot)
}

// setAside checks a write that made a READY row WAITING, and changed
// nothing else: a claim that set the row aside, its partition full. Only
// a worker's claim does, and only to a keyless row of a partition (a
// keyed row waits for its place READY, in its key's line).
func (c *checker) setAside(r *row, w *Write, op bool) {
	switch {
	case op:
		c.fail(Owners, r, "audit %d: the operator %s made the READY row WAITING", w.Seq, w.Writer)
	case r.key != "":
		c.fail(Partitions, r, "audit %d: %s set aside a row of key %q (READY to WAITING); a keyed row is never set aside", w.Seq, w.Writer, r.key)
	case r.partition == "":
		c.fail(Partitions, r, "audit %d: %s set aside a row of no partition (READY to WAITING)", w.Seq, w.Writer)
	default:
		r.setAside = append(r.setAside, w)
	}
}
