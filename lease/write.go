package lease

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasework/leasework"
)

// Op is what a guarded write does to its claim's row. Every op is made by
// its own constructor ([Complete], [Retry] ...) and written by
// [Store.Write], [Store.WriteMany] or [Store.WriteTx], under the guard of
// invariant 2: the row is INPROGRESS at the claim's generation, its lease
// has not expired, and its event was not cancelled since the claim.
type Op uint8

// The ops, in the order a batch writes them.
const (
	OpComplete          Op = iota + 1 // DONE
	OpCompleteAndDelete               // deleted, for a table that keeps no history
	OpRetry                           // READY after a delay, or FAILED on the last allowed attempt
	OpSnooze                          // READY after a delay, not spending an attempt
	OpFail                            // FAILED
	OpRelease                         // READY at once, the attempt given back
	OpRenew                           // the lease extended
	OpProgress                        // progress recorded for the next attempt
	OpStep                            // a step's result recorded for the next attempts
	OpOutput                          // the handler's output recorded with the row
	numOps
)

// ops is what the store knows of each op, the one list the write path
// reads: its name (in errors), its statement, the values each write
// passes to it beside the generation (nil: none), whether it ends the
// attempt (a rejected one of an attempt cancelled while it ran is that
// attempt's acknowledged stop), and how a row at the claim's generation
// shows that this claim already made it (nil: it cannot; see [Verdict]).
// Statements taking more than the batch's parameters ($1, $2) add theirs
// in Store.statement.
var ops = [numOps]struct {
	name     string
	query    func(q *queries) string
	values   func(w Write) []any
	ends     bool
	recorded func(st rowState, text string) bool
	// queryTx is a completion's statement in a caller's transaction
	// ([Store.WriteTx]): query's passes the keys of the rows it finished
	// on itself, for a statement that commits alone (passingKeysOn).
	queryTx func(q *queries) string
}{
	OpComplete: {name: "complete", query: func(q *queries) string { return q.complete }, ends: true,
		queryTx:  func(q *queries) string { return q.completeTx },
		recorded: func(st rowState, _ string) bool { return st.status == leasework.StatusDone }},
	OpCompleteAndDelete: {name: "complete and delete", query: func(q *queries) string { return q.completeDelete }, ends: true,
		queryTx:  func(q *queries) string { return q.completeDeleteTx },
		recorded: func(st rowState, _ string) bool { return st.status == leasework.StatusDone }},
	OpRetry: {name: "retry", query: func(q *queries) string { return q.retry }, values: retryValues, ends: true,
		recorded: func(st rowState, text string) bool {
			// A lease that expired on the last attempt also leaves FAILED
			// at the claim's generation, with its own text.
			return (st.status == leasework.StatusReady || st.status == leasework.StatusFailed) && st.lastError == text
		}},
	OpSnooze: {name: "snooze", query: func(q *queries) string { return q.retry }, values: retryValues, ends: true,
		recorded: func(st rowState, text string) bool { return st.status == leasework.StatusReady && st.lastError == text }},
	OpFail: {name: "fail", query: func(q *queries) string { return q.fail }, ends: true,
		values: func(w Write) []any { return []any{w.stored()} },
		recorded: func(st rowState, text string) bool {
			return st.status == leasework.StatusFailed && st.lastError == text
		}},
	OpRelease: {name: "release", query: func(q *queries) string { return q.release }, ends: true,
		// A release clears what would tell it apart from a retry; one
		// claim records one outcome.
		recorded: func(st rowState, _ string) bool { return st.status == leasework.StatusReady }},
	OpRenew:    {name: "renew", query: func(q *queries) string { return q.renew }},
	OpProgress: {name: "progress", query: func(q *queries) string { return q.progress }},
	OpStep: {name: "step", query: func(q *queries) string { return q.step },
		values: func(w Write) []any { return []any{w.step, base64.StdEncoding.EncodeToString(w.progress)} }},
	OpOutput: {name: "output", query: func(q *queries) string { return q.output }},
}

// singleRow says whether op is written one row a statement: a progress or
// an output write carries data of its own, up to its bound. Steps are
// batched: a worker's handlers record theirs at once.
func singleRow(op Op) bool { return op == OpProgress || op == OpOutput }

// retryValues are a retry's or a snooze's values: the delay in
// microseconds, the text, and the snooze flag (1: the attempt is not
// spent).
func retryValues(w Write) []any {
	snooze := 0
	if w.op == OpSnooze {
		snooze = 1
	}
	return []any{w.delay.Microseconds(), w.stored(), snooze}
}

// String returns the op's name in lower case: "complete", "retry" ...
func (o Op) String() string {
	if o > 0 && o < numOps {
		return ops[o].name
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Write is one guarded write for one claim: an op, the claim's ref, and
// the op's data. Make one with the op's constructor; the zero Write has no
// op and is refused.
type Write struct {
	op       Op
	ref      leasework.Ref
	delay    time.Duration // OpRetry, OpSnooze
	text     string        // OpRetry, OpFail: the error stored; OpSnooze: the last error kept
	lease    time.Duration // OpRenew
	progress []byte        // OpProgress, OpStep (the encoded result), OpOutput
	step     string        // OpStep: the step's name
}

// Complete marks the claim DONE.
func Complete(ref leasework.Ref) Write { return Write{op: OpComplete, ref: ref} }

// CompleteAndDelete completes the claim of a table that keeps no history:
// its row is deleted instead of marked DONE, under the same guard; an
// accepted result reports Status DONE. Deleting forgets the event id, so a
// later enqueue of the same id is no longer a duplicate.
func CompleteAndDelete(ref leasework.Ref) Write { return Write{op: OpCompleteAndDelete, ref: ref} }

// Retry sends the claim back to READY, due after delay (zero or more), with
// errText recorded as the row's last error. On the row's last allowed
// attempt it ends FAILED instead; the result's Status says which. Any text
// is accepted: it is made storable by [CleanText] with [MaxErrorBytes].
func Retry(ref leasework.Ref, delay time.Duration, errText string) Write {
	return Write{op: OpRetry, ref: ref, delay: delay, text: errText}
}

// Snooze sends the claim back to READY, due after delay (zero or more),
// without spending an attempt: the row's attempt budget grows by one and
// its snooze count by one, so the next claim's leasework.Claim.Snoozes
// tells it from a failure (leasework.Snooze). lastError is kept as the
// row's last error: give the claim's LastError.
func Snooze(ref leasework.Ref, delay time.Duration, lastError string) Write {
	return Write{op: OpSnooze, ref: ref, delay: delay, text: lastError}
}

// Fail ends the claim FAILED with reason recorded as the row's last error,
// made storable by [CleanText] with [MaxErrorBytes].
func Fail(ref leasework.Ref, reason string) Write {
	return Write{op: OpFail, ref: ref, text: reason}
}

// Release gives the claim back to READY at once and gives back the attempt
// it consumed, for a graceful shutdown; listening workers are notified.
func Release(ref leasework.Ref) Write { return Write{op: OpRelease, ref: ref} }

// Renew extends the claim's lease to lease (at least 1ms) from now, by
// database time; the result's LeaseUntil is the new deadline. An expired
// lease cannot be renewed.
func Renew(ref leasework.Ref, lease time.Duration) Write {
	return Write{op: OpRenew, ref: ref, lease: lease}
}

// Progress records progress for the claim; the row's next attempt
// receives it in leasework.Claim.Progress, so a long job can resume where
// it stopped.
func Progress(ref leasework.Ref, progress []byte) Write {
	return Write{op: OpProgress, ref: ref, progress: progress}
}

// MaxStepNameBytes is the longest step name [Step] accepts, in bytes.
const MaxStepNameBytes = 200

// Step records the result of the claim's step name, encoded (value), for
// the event's next attempts: each later claim of the row hands it in
// leasework.Claim.Steps, so the step is not run again. Recording a name
// again replaces its result. The name is not empty, at most
// [MaxStepNameBytes] bytes of valid UTF-8 without NUL; the store keeps the
// generation that recorded it and when (see [StepRecord]).
func Step(ref leasework.Ref, name string, value []byte) Write {
	return Write{op: OpStep, ref: ref, step: name, progress: value}
}

// Output records the claim's output with its row ([Row].Output), for the
// store, the console and the event's dependents to read. Recording again
// replaces it.
func Output(ref leasework.Ref, output []byte) Write {
	return Write{op: OpOutput, ref: ref, progress: output}
}

// Op returns the write's op.
func (w Write) Op() Op { return w.op }

// Ref returns the claim the write is for.
func (w Write) Ref() leasework.Ref { return w.ref }

// Delay returns the delay of a retry or a snooze.
func (w Write) Delay() time.Duration { return w.delay }

// Text returns the text a retry or a failure records, or the last error a
// snooze keeps, as given (the store cleans it when it writes).
func (w Write) Text() string { return w.text }

// Lease returns the lease of a renewal.
func (w Write) Lease() time.Duration { return w.lease }

// ProgressData returns the progress a progress write records.
func (w Write) ProgressData() []byte { return w.progress }

// StepName returns the name of the step a step write records.
func (w Write) StepName() string { return w.step }

// Data returns the bytes a progress, step or output write records.
func (w Write) Data() []byte { return w.progress }

// check refuses a write no statement can make.
func (w Write) check() error {
	switch {
	case w.op == 0 || w.op >= numOps:
		return fmt.Errorf("lease: write for row %d generation %d has no op: make it with a constructor such as lease.Complete", w.ref.ID, w.ref.Generation)
	case (w.op == OpRetry || w.op == OpSnooze) && w.delay < 0:
		return fmt.Errorf("lease: %s: row %d generation %d: Delay is %v; it must not be negative", w.op, w.ref.ID, w.ref.Generation, w.delay)
	case w.op == OpRenew && w.lease < time.Millisecond:
		return fmt.Errorf("lease: renew: row %d generation %d: lease is %v; it must be at least 1ms", w.ref.ID, w.ref.Generation, w.lease)
	case w.op == OpStep:
		if why := checkStepName(w.step); why != "" {
			return fmt.Errorf("lease: step: row %d generation %d: %s", w.ref.ID, w.ref.Generation, why)
		}
	}
	return nil
}

// stored is the text the write stores, as the store stores it: cleaned,
// so that no text can fail a statement.
func (w Write) stored() string { return CleanText(w.text, MaxErrorBytes) }

// Verdict is what the database made of one guarded write. Each is decided
// in one place, from the write's answer and, for a rejected write, from
// the row read again by id:
//
//	Verdict          Err matches                        When
//	---------------  ---------------------------------  -----------------------------------------------
//	VerdictAccepted  nil                                the guard passed: the write is made (Status,
//	                                                    and LeaseUntil for a renewal, say what it left)
//	VerdictRecorded  nil                                rejected, but the row shows this claim's own
//	                                                    write of the same op, made by an earlier try
//	                                                    whose reply was lost (a timeout, a dropped
//	                                                    connection); Status is the row's. A success.
//	VerdictLost      leasework.ErrLeaseLost             rejected: a newer claim, an expired lease,
//	                                                    another outcome
//	VerdictDone      leasework.ErrLeaseLost             rejected, and the row is DONE at the claim's
//	                                                    generation: the claim's completion is recorded
//	                                                    by another write (the handler's transaction
//	                                                    whose COMMIT lost its reply, say). Never for a
//	                                                    completion, which is VerdictRecorded then
//	VerdictCancelled leasework.ErrCancelled (and so     rejected: the event was cancelled after the
//	                 leasework.ErrLeaseLost)            claim took it ([Store.Cancel]); a rejected write
//	                                                    that ends the attempt (any but a renewal or a
//	                                                    progress write) is that attempt's stop: the
//	                                                    row ends DISCARDED and a key passes on
//	VerdictGone      leasework.ErrLeaseLost             rejected: the row no longer exists (a completion
//	                                                    deleted it, this claim's earlier try or a later
//	                                                    claim's, or retention did)
//	VerdictBusy      [ErrRowBusy], not ErrLeaseLost     renewals only: another transaction holds the
//	                                                    row's lock (most often the claim's own handler,
//	                                                    completing it in its transaction); neither
//	                                                    renewed nor lost: renew again later
//	VerdictNoAnswer  the statement's error              the statement failed: the write may or may
//	                                                    not have been made. Write it again: a write
//	                                                    that was made is then VerdictRecorded (a
//	                                                    renewal or a progress write, never)
//
// "This claim's own write" is decided from what the write would have left,
// compared with the row: always its generation, which only claims and
// requeues change (both raise it), so a finished row at the claim's
// generation was finished by that claim or by the claim statement expiring
// it. Then, per op: a completion, status DONE (only a completion makes
// DONE); a retry, READY or FAILED with the text it stores (a lease that
// expired on the last attempt also leaves FAILED at the same generation,
// with its own text); a snooze, READY with the text it keeps; a failure,
// FAILED with its reason; a release, READY (a release clears what would
// tell it apart, but one claim records one outcome). A renewal and a
// progress write leave nothing to recognise them by.
type Verdict uint8

// The verdicts; see [Verdict] for what each means.
const (
	VerdictAccepted Verdict = iota + 1
	VerdictRecorded
	VerdictLost
	VerdictDone
	VerdictCancelled
	VerdictGone
	VerdictBusy
	VerdictNoAnswer
	numVerdicts
)

var verdictNames = [numVerdicts]string{
	VerdictAccepted:  "accepted",
	VerdictRecorded:  "recorded",
	VerdictLost:      "lost",
	VerdictDone:      "done",
	VerdictCancelled: "cancelled",
	VerdictGone:      "gone",
	VerdictBusy:      "busy",
	VerdictNoAnswer:  "no answer",
}

// String returns the verdict's name in lower case: "accepted", "lost" ...
func (v Verdict) String() string {
	if v > 0 && v < numVerdicts {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Result is the answer to one guarded write.
type Result struct {
	Op      Op
	Ref     leasework.Ref
	Verdict Verdict
	// Err is nil when the write is made (VerdictAccepted,
	// VerdictRecorded); otherwise it says why, matched with errors.Is as
	// the table of [Verdict] says.
	Err error
	// Status is the row's status after a write that is made.
	Status leasework.Status
	// LeaseUntil is the new deadline after an accepted renewal.
	LeaseUntil time.Time
}

// rowState is what the store reads again of a row whose write was
// rejected.
type rowState struct {
	status     leasework.Status
	generation int64
	lastError  string
	cancelled  bool // cancelled_at is set
}

// judge decides the verdict of a rejected write from its row, read again
// by id (nil when the row no longer exists), and sets r's Verdict, Err and
// Status. It is the one place verdicts of rejected writes are decided.
func judge(r *Result, w Write, st *rowState) {
	switch {
	case st == nil:
		r.Verdict = VerdictGone
		r.Err = fmt.Errorf("lease: %s row %d generation %d: the row no longer exists: %w", w.op, w.ref.ID, w.ref.Generation, leasework.ErrLeaseLost)
	case recordedBy(w, *st):
		r.Verdict, r.Err, r.Status = VerdictRecorded, nil, st.status
	case cancelledSince(w.ref, *st):
		r.Verdict = VerdictCancelled
		r.Err = fmt.Errorf("lease: %s row %d generation %d: %w", w.op, w.ref.ID, w.ref.Generation, leasework.ErrCancelled)
	case st.status == leasework.StatusDone && st.generation == w.ref.Generation:
		r.Verdict, r.Err = VerdictDone, lost(w)
	default:
		r.Verdict, r.Err = VerdictLost, lost(w)
	}
}

// recordedBy reports whether a row in state st shows that the claim of w
// already made w; see [Verdict].
func recordedBy(w Write, st rowState) bool {
	rec := ops[w.op].recorded
	return st.generation == w.ref.Generation && rec != nil && rec(st, w.stored())
}

func lost(w Write) error {
	return fmt.Errorf("lease: %s row %d generation %d: %w", w.op, w.ref.ID, w.ref.Generation, leasework.ErrLeaseLost)
}

// CheckStepName returns an error saying what is wrong with a step's name
// for [Step], or nil: check it before the step runs, so that a step whose
// effects are made is never refused its record.
func CheckStepName(name string) error {
	if why := checkStepName(name); why != "" {
		return fmt.Errorf("lease: step: %s", why)
	}
	return nil
}

// checkStepName says what is wrong with a step's name, or "".
func checkStepName(name string) string {
	switch {
	case name == "":
		return "the step's name is empty"
	case len(name) > MaxStepNameBytes:
		return fmt.Sprintf("the step's name is %d bytes; at most %d are allowed", len(name), MaxStepNameBytes)
	case !utf8.ValidString(name):
		return fmt.Sprintf("the step's name %q is not valid UTF-8", name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Sprintf("the step's name %q contains NUL", name)
	}
	return ""
}
