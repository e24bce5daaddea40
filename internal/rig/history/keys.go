package history

import (
	"sort"
	"time"
)

// checkKeys checks order per key: places in line against the real-time
// order of acknowledged enqueues, claims against the finish of every
// earlier row, and runs against the life of every earlier row's runs.
func (c *checker) checkKeys() {
	byKey := map[string][]*row{}
	for _, r := range c.ordered {
		if r.key == "" || r.insert == nil {
			continue
		}
		if r.keySeq == 0 {
			c.fail(KeyOrder, r, "keyed row (key %q) never got its place in line (key_seq)", r.key)
			continue
		}
		byKey[r.key] = append(byKey[r.key], r)
	}
	c.checkCommitOrder()
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rows := byKey[k]
		sort.Slice(rows, func(i, j int) bool { return rows[i].keySeq < rows[j].keySeq })
		var (
			finished   time.Time // the latest finish of an earlier row
			finishTx   int64     // the transaction that wrote it
			unfinished *row      // an earlier row that never finished: it holds the key
			live       time.Time // the latest live end of an earlier row's runs ("never": zero, with liveRun set)
			liveRun    *Run
			liveRow    *row
		)
		for _, r := range rows {
			c.v.Checked[KeyOrder]++
			for _, cl := range r.claims {
				switch {
				case unfinished != nil:
					c.fail(KeyOrder, r, "claimed by %s at %s while earlier row %d (%s) of key %q was unfinished (it ends %s)",
						cl.Writer, ts(cl.Stmt), unfinished.id, unfinished.eventID, k, unfinished.final())
				case cl.Old.Status == Waiting && (finishTx == 0 || cl.Txid != finishTx):
					c.fail(KeyOrder, r, "claimed by %s at %s (generation %d) while WAITING behind an earlier row of key %q",
						cl.Writer, ts(cl.Stmt), cl.New.Generation, k)
				case cl.Old.Status == Waiting:
					// A turn taken: the transaction that finished the
					// key's previous row claimed it, and commits both.
				case !cl.Stmt.After(finished):
					c.fail(KeyOrder, r, "claimed by %s at %s, before an earlier row of key %q finished at %s", cl.Writer, ts(cl.Stmt), k, ts(finished))
				}
			}
			for _, run := range r.runs {
				if !after(c.liveEnd(r, run), run.Start) {
					continue // never live
				}
				if liveRun != nil && after(live, run.Start) {
					c.fail(KeyOrder, r, "the handler of generation %d in %s started at %s while the handler of earlier row %d (%s, generation %d, in %s, from %s) of key %q was live until %s",
						run.Generation, run.Worker, ts(run.Start), liveRow.id, liveRow.eventID, liveRun.Generation, liveRun.Worker, ts(liveRun.Start), k, ts(live))
				}
			}
			for _, run := range r.runs {
				if end := c.liveEnd(r, run); after(end, run.Start) && (liveRun == nil || after(end, live)) {
					live, liveRun, liveRow = end, run, r
				}
			}
			if unfinished == nil {
				if f := r.finishWrite(); f == nil {
					unfinished = r
				} else if f.At.After(finished) {
					finished, finishTx = f.At, f.Txid
				}
			}
		}
	}
}

// finishWrite is r's write that took it out of its key's line, into DONE
// or DISCARDED; nil if it never made one (FAILED holds the key).
func (r *row) finishWrite() *Write {
	for _, w := range r.terms {
		if w.New.Status == Done || w.New.Status == Discarded {
			return w
		}
	}
	return nil
}

// final is the row's last status, for reports.
func (r *row) final() string {
	if len(r.writes) == 0 {
		return "(no write)"
	}
	last := r.writes[len(r.writes)-1]
	if last.Op == Delete {
		return "deleted"
	}
	return last.New.Status
}

// checkCommitOrder checks that a key's places in line follow the order in
// which the acknowledged enqueues committed: an event whose enqueue
// returned before another's was called has the earlier place, and the
// events of one enqueue take their places in the order given.
func (c *checker) checkCommitOrder() {
	type placed struct {
		r                 *row
		invoked, returned time.Time
	}
	byKey := map[string][]placed{}
	for _, e := range c.h.Enqueues {
		if !e.Acked {
			continue
		}
		last := map[string]*row{} // per key, the call's event before
		for _, ev := range e.Events {
			r := c.byEvent[ev.EventID]
			if ev.Key == "" || r == nil || r.keySeq == 0 {
				continue
			}
			if prev := last[ev.Key]; prev != nil && prev.keySeq > r.keySeq {
				c.fail(KeyOrder, r, "of one enqueue's events of key %q, %s was given after %s but got the earlier place (key_seq %d < %d)",
					ev.Key, r.eventID, prev.eventID, r.keySeq, prev.keySeq)
			}
			last[ev.Key] = r
			byKey[ev.Key] = append(byKey[ev.Key], placed{r: r, invoked: e.Invoked, returned: e.Returned})
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ps := byKey[k]
		sort.Slice(ps, func(i, j int) bool { return ps[i].r.keySeq < ps[j].r.keySeq })
		var latest *placed // of the earlier places, the one whose enqueue was called last
		for i := range ps {
			p := &ps[i]
			if latest != nil && latest.invoked.After(p.returned) {
				c.fail(KeyOrder, p.r, "key %q: its enqueue returned at %s, before the enqueue of %s was called at %s, yet %s has the earlier place (key_seq %d < %d)",
					k, ts(p.returned), latest.r.eventID, ts(latest.invoked), latest.r.eventID, latest.r.keySeq, p.r.keySeq)
			}
			if latest == nil || p.invoked.After(latest.invoked) {
				latest = p
			}
		}
	}
}
