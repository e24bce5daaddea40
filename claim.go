package leasework

import "time"

// Status is the state of an event row.
type Status string

// The states of an event row. A row moves READY -> INPROGRESS when claimed and
// from INPROGRESS to DONE, back to READY (retry, release) or to FAILED. DONE
// and FAILED are terminal; only an explicit requeue moves a FAILED row back to
// READY.
//
// Rows with a key have two more states. A keyed row enqueued while an earlier
// row of its key is unfinished (READY, INPROGRESS or FAILED) is WAITING: it
// is never claimed, and becomes READY when the last unfinished row before it
// is DONE, DISCARDED or deleted. DISCARDED is terminal: an operator gave up
// on a FAILED row, which releases its key to the rows waiting behind it.
const (
	StatusReady      Status = "READY"
	StatusInProgress Status = "INPROGRESS"
	StatusDone       Status = "DONE"
	StatusFailed     Status = "FAILED"
	StatusWaiting    Status = "WAITING"
	StatusDiscarded  Status = "DISCARDED"
)

// Valid reports whether s is one of the six states.
func (s Status) Valid() bool {
	switch s {
	case StatusReady, StatusInProgress, StatusDone, StatusFailed, StatusWaiting, StatusDiscarded:
		return true
	}
	return false
}

// Claim is one event owned by one worker until LeaseUntil.
//
// ID and Generation together identify the claim: every outcome write carries
// both, and the database rejects it once a newer claim exists or the lease has
// expired. Generation is a fencing token: pass it downstream so other systems
// can reject a stale owner too. EventID is stable across retries and
// reclaims; consumers deduplicate on it.
type Claim struct {
	ID          int64             // row id
	EventID     string            // stable identity of the event, unique in the table
	Kind        string            // selects the handler
	Key         string            // optional ordering key given at enqueue ("" if none); a key's events are claimed one at a time, in enqueue order
	Payload     []byte            // the event's body, as enqueued
	Generation  int64             // grows with every claim of the row, and past every earlier claim's after a failover; the fencing token
	Attempt     int               // 1 for the first claim; counts every claim, crashed ones included
	MaxAttempts int               // the attempt budget of the row
	LeaseUntil  time.Time         // lease deadline set by the claim (database clock); renewals extend the lease in the database, not this copy
	Reclaimed   bool              // true when the previous owner's lease expired unfinished
	Progress    []byte            // the last progress recorded by an earlier attempt, or nil
	LastError   string            // the error recorded by the previous attempt, or ""
	Queue       string            // the queue the event was claimed from
	Priority    int               // the event's priority: 0 (claimed first) to 9
	DueAt       time.Time         // when this attempt became due (database clock): the event's run time, or its retry's; for a reclaimed row, the attempt before it
	Metadata    map[string]string // string pairs given at enqueue (the enqueuer's trace context, say), or nil
}

// Ref names one claim of one row: the row id and the generation it was claimed
// with.
type Ref struct {
	ID         int64
	Generation int64
}

// Ref returns the claim's (ID, Generation) pair.
func (c *Claim) Ref() Ref { return Ref{ID: c.ID, Generation: c.Generation} }
