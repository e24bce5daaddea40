package leasework

import (
	"slices"
	"time"
)

// Status is the state of an event row.
type Status string

// The states of an event row. A row moves READY -> INPROGRESS when claimed and
// from INPROGRESS to DONE, back to READY (retry, release) or to FAILED. DONE
// and FAILED are terminal; only an explicit requeue moves a FAILED row back to
// READY.
//
// Rows with a key have one more state. A keyed row enqueued while an earlier
// row of its key is unfinished (READY, INPROGRESS or FAILED) is WAITING: it
// is never claimed, and becomes READY when the last unfinished row before it
// is DONE, DISCARDED or deleted.
//
// DISCARDED is terminal: the event was given up on without running to its
// end, by a cancel (of a READY, WAITING or FAILED row at once; of a running
// one once its attempt has stopped) or by an operator's discard of a FAILED
// row. A keyed row DISCARDED releases its key to the rows waiting behind it.
//
// [Statuses] lists them all; code that shows or counts rows per status
// iterates it rather than naming each.
const (
	StatusReady      Status = "READY"
	StatusInProgress Status = "INPROGRESS"
	StatusDone       Status = "DONE"
	StatusFailed     Status = "FAILED"
	StatusWaiting    Status = "WAITING"
	StatusDiscarded  Status = "DISCARDED"
)

// statuses is every state, in the order an event goes through them.
var statuses = [...]Status{StatusReady, StatusWaiting, StatusInProgress, StatusDone, StatusFailed, StatusDiscarded}

// Statuses returns every state of an event row, in the order an event goes
// through them: READY, WAITING, INPROGRESS, DONE, FAILED, DISCARDED.
func Statuses() []Status { return slices.Clone(statuses[:]) }

// Valid reports whether s is one of the states [Statuses] lists.
func (s Status) Valid() bool { return slices.Contains(statuses[:], s) }

// Claim is one event owned by one worker until LeaseUntil.
//
// ID and Generation together identify the claim: every outcome write carries
// both, and the database rejects it once a newer claim exists or the lease has
// expired. Generation is a fencing token: pass it downstream so other systems
// can reject a stale owner too. EventID is stable across retries and
// reclaims; consumers deduplicate on it.
//
// Attempt counts every claim of the event, snoozed and crashed ones
// included; a claim released at a worker's shutdown is given back. It is
// zero only in a Claim no worker handed out. Snoozes counts the earlier
// claims that ended in [Snooze], and [Claim.Failures] the others: attempts
// that failed or whose lease ran out. A snooze is not a failure: it adds
// one to MaxAttempts, so the row's budget of claims is never spent by
// snoozes, while a crash spends it like a failure. Once Attempt reaches
// MaxAttempts, a failure or a lease that runs out ends the event FAILED.
type Claim struct {
	ID          int64             // row id
	EventID     string            // stable identity of the event, unique in the table
	Kind        string            // selects the handler
	Key         string            // optional ordering key given at enqueue ("" if none); a key's events are claimed one at a time, in enqueue order
	Payload     []byte            // the event's body, as enqueued
	Generation  int64             // grows with every claim of the row, and past every earlier claim's after a failover; the fencing token
	Attempt     int               // claims of the event so far, this one included: 1 for the first; snoozed and crashed claims count
	Snoozes     int               // how many of the earlier claims ended in a snooze; 0 when none did
	MaxAttempts int               // the row's budget of claims: the budget given at enqueue, plus one for each snooze
	LeaseUntil  time.Time         // lease deadline set by the claim (database clock); renewals extend the lease in the database, not this copy
	Reclaimed   bool              // true when the previous owner's lease expired unfinished
	Progress    []byte            // the last progress recorded by an earlier attempt, or nil
	LastError   string            // the error recorded by the previous attempt, or ""
	Queue       string            // the queue the event was claimed from
	Priority    int               // the event's priority: 0 (claimed first) to 9
	DueAt       time.Time         // when this attempt became due (database clock): the event's run time, or its retry's; for a reclaimed row, the attempt before it
	Metadata    map[string]string // string pairs given at enqueue (the enqueuer's trace context, say), or nil
	Steps       map[string][]byte // the encoded results of the steps earlier attempts recorded, by name (framework.Step), or nil
}

// Ref names one claim of one row: the row id and the generation it was claimed
// with.
type Ref struct {
	ID         int64
	Generation int64
}

// Failures returns how many earlier claims of the event did not end in a
// snooze: attempts that failed, and attempts whose lease ran out (a crash,
// a stall): Attempt - 1 - Snoozes, never negative. It is 0 on a first
// attempt and after snoozes alone. A retry policy counts these, never
// snoozes: its delay follows the number of failures, and its cap limits
// them.
func (c *Claim) Failures() int { return max(c.Attempt-1-c.Snoozes, 0) }

// Ref returns the claim's (ID, Generation) pair.
func (c *Claim) Ref() Ref { return Ref{ID: c.ID, Generation: c.Generation} }
