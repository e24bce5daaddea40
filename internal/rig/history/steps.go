package history

import (
	"strconv"
)

// checkSteps checks the steps property. Every write that changes a row's
// record of the step (StepName) is a step record: it must leave the row
// INPROGRESS at the generation it found, and record that generation, as
// the generation's own run does (its value names the generation that ran
// the step): a stale owner's record, accepted into a row a newer claim
// holds, names an older one. And every run that reached the step ran it
// exactly when its claim found no record, and otherwise got back the
// record its claim found: a recorded step is never run again, and never
// replaced by one its run did not read. (That the record was written by
// the generation's claimant while its lease ran is the owners property's,
// as for every write of a running attempt.)
func (c *checker) checkSteps() {
	for _, r := range c.ordered {
		for _, w := range r.writes {
			if w.Op != Update {
				continue
			}
			for name, was := range w.Old.Steps {
				if _, ok := w.New.Steps[name]; !ok {
					c.v.Checked[Steps]++
					c.fail(Steps, r, "step %q (recorded by generation %d) removed by a write of %s at %s", name, was.Gen, w.Writer, ts(w.Stmt))
				}
			}
			want := strconv.Quote("g" + strconv.FormatInt(w.New.Generation, 10))
			for name, rec := range w.New.Steps {
				if was, ok := w.Old.Steps[name]; ok && was == rec {
					continue
				}
				c.v.Checked[Steps]++
				switch {
				case w.Old.Status != InProgress || w.New.Status != InProgress || w.Old.Generation != w.New.Generation:
					c.fail(Steps, r, "step %q recorded (as generation %d) by a write of %s from %s at generation %d to %s at %d: only a running attempt records a step",
						name, rec.Gen, w.Writer, w.Old.Status, w.Old.Generation, w.New.Status, w.New.Generation)
				case rec.Gen != w.New.Generation || rec.Value != want:
					c.fail(Steps, r, "step %q recorded by %s at %s as generation %d with result %s into the row at generation %d: not its claimant's (a stale owner's record)",
						name, w.Writer, ts(w.Stmt), rec.Gen, rec.Value, w.New.Generation)
				}
			}
		}
		for _, run := range r.runs {
			if run.StepRead == 0 && !run.StepRan {
				continue
			}
			c.v.Checked[Steps]++
			if run.StepRead != 0 {
				c.v.Figures["steps_read"]++
			}
			cl := r.claimOf[run.Generation]
			if cl == nil {
				continue // a run without its claim: the owners property's
			}
			found := cl.New.Steps[StepName].Gen
			switch {
			case run.StepRan && run.StepRead != 0:
				c.fail(Steps, r, "the run of generation %d on %s both read the step (recorded by %d) and ran it", run.Generation, run.Worker, run.StepRead)
			case run.StepRan && found != 0:
				c.fail(Steps, r, "the run of generation %d on %s ran the step again, though its claim found it recorded by generation %d",
					run.Generation, run.Worker, found)
			case run.StepRead != 0 && run.StepRead != found:
				c.fail(Steps, r, "the run of generation %d on %s got back the step recorded by generation %d; its claim found %s",
					run.Generation, run.Worker, run.StepRead, recordOf(found))
			}
		}
	}
}

// recordOf names a claim's find of the step's record.
func recordOf(gen int64) string {
	if gen == 0 {
		return "none"
	}
	return "the record of generation " + strconv.FormatInt(gen, 10)
}
