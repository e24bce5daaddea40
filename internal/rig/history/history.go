package history

import "time"

// History is everything a soak recorded.
type History struct {
	// Kinds describes the event kinds: which are Transactional, and their
	// retry policies. A kind not named has neither.
	Kinds map[string]Kind

	// Schedules are the periodic schedules the workers ran.
	Schedules []Schedule

	// Enqueues are the test's enqueue calls, acknowledged or not.
	Enqueues []Enqueue

	// Writes is the database's audit, in any order: Check orders each
	// row's writes by Seq.
	Writes []Write

	// Runs are the handler runs the worker processes recorded.
	Runs []Run

	// Effects are the Transactional handlers' business effects that
	// committed.
	Effects []Effect

	// Cancels are the test's cancel calls.
	Cancels []Cancel

	// Pauses are the test's pauses of a queue.
	Pauses []Pause

	// Limits are the test's settings of concurrency limits, those of one
	// limit made one after another: the first declares it.
	Limits []Limit

	// RateLimits are the test's settings of rate limits, those of one
	// limit made one after another: the first declares it.
	RateLimits []RateLimit

	// Processes are the worker processes by worker id.
	Processes map[string]Process

	// Faults are the faults done to the workers and the server, for the
	// figures (a re-run inside a fault's window is the fault's).
	Faults []Fault

	// Operators are the application names of the test's own sessions:
	// enqueues, fixtures, cancels. Every other writer is a worker.
	Operators []string

	// Settled is when the test began to wait for every event to finish:
	// an event inserted before it must end finished; one inserted after it
	// (a firing of a schedule, a final probe) may not have.
	Settled time.Time
}

// Kind is what the checker knows of an event kind.
type Kind struct {
	// Transactional: the handler's business effect and its completion
	// commit in one transaction, and every effect is in History.Effects.
	Transactional bool

	// Policy is the kind's retry policy; nil: its delays are not checked.
	Policy *Policy
}

// Policy is a retry policy without randomization: the delay after failure
// n (1 for the first) is InitialInterval × Multiplier^(n-1), capped at
// MaxInterval, as framework.RetryPolicy computes it with a negative
// RandomizationFactor.
type Policy struct {
	InitialInterval time.Duration
	Multiplier      float64
	MaxInterval     time.Duration
	// MaxAttempts, when positive, fails an event whose handler returns an
	// error once it has made this many attempts, snoozes not counted.
	MaxAttempts int
}

// Delay returns the delay after failure n (1 for the first): the
// arithmetic of github.com/cenkalti/backoff/v4's ExponentialBackOff
// without randomization.
func (p Policy) Delay(n int) time.Duration {
	d := p.InitialInterval
	for i := 1; i < n && i < 1000; i++ {
		if float64(d) >= float64(p.MaxInterval)/p.Multiplier {
			d = p.MaxInterval
		} else {
			d = time.Duration(float64(d) * p.Multiplier)
		}
	}
	return d
}

// Schedule is a periodic schedule of a fixed interval: it fires at the
// multiples of Every since the Unix epoch, each firing an event of Kind
// whose id is Name, a colon and the fire time in UTC, RFC 3339.
type Schedule struct {
	Name  string
	Kind  string
	Every time.Duration
}

// Enqueue is one enqueue call of the test: its events, in one transaction.
type Enqueue struct {
	Invoked, Returned time.Time
	// Acked is true when the commit returned nil: the events must exist.
	// An enqueue whose commit failed may or may not have committed.
	Acked  bool
	Events []Event
}

// Event is one event of an enqueue.
type Event struct {
	EventID, Kind, Key string
	// Want is the state its payload asks it to end in: "DONE" (the
	// default when empty) or "FAILED".
	Want string
}

// The operations of a [Write].
const (
	Insert = "INSERT"
	Update = "UPDATE"
	Delete = "DELETE"
)

// The states of an events row.
const (
	Ready      = "READY"
	Waiting    = "WAITING"
	InProgress = "INPROGRESS"
	Done       = "DONE"
	Failed     = "FAILED"
	Discarded  = "DISCARDED"
)

// Write is one committed change of an events row, as the audit trigger
// recorded it in the writing transaction.
type Write struct {
	Seq int64  // the audit's order: for one row, the order of the commits
	Op  string // Insert, Update or Delete
	Row int64
	// The row's constants; Partition is empty for a row of no partition.
	EventID, Kind, Key, Queue, Partition string
	// Cost is the row's cost under rate limits, a constant too: the
	// starts each of its attempts takes (0 is read as 1).
	Cost   int
	Writer string    // the writing session's application_name
	Txid   int64     // the writing transaction
	Stmt   time.Time // statement_timestamp() of the writing statement
	At     time.Time // clock_timestamp() in the trigger
	// Old is the row before the write (zero for an insert), New after it
	// (zero for a delete).
	Old, New State
}

// State is the part of an events row the checker follows.
type State struct {
	Status      string
	Generation  int64
	Attempt     int
	MaxAttempts int
	LeaseUntil  time.Time // zero: NULL
	NextAttempt time.Time
	Worker      string
	KeySeq      int64 // zero: not yet in line (or keyless)
	LastError   string
	// CancelledAt is when a cancel marked the row, zero if none did: a
	// cancel of a running attempt may only mark its row, which stays
	// INPROGRESS until that attempt's owner writes again (the
	// acknowledged stop) or its lease ends (a claim then ends it); both
	// end it DISCARDED at a new generation.
	CancelledAt time.Time
	// KindSlot and QueueSlot name the slots of the kind's and the queue's
	// limits the row's attempt is counted in (zero: none). A claim
	// without floors (a sweep) may clear them on a row whose lease ran
	// out, and count its place for a row it takes: no other write changes
	// them but a claim.
	KindSlot, QueueSlot int64
	// PartitionSlot names the slot of its partition's limit the row's
	// attempt is counted in (zero: none); as KindSlot, a sweep may clear
	// it on a row whose lease ran out.
	PartitionSlot int64
	// Steps are the steps recorded in the row, by name (nil: none). Only
	// a step write changes them.
	Steps map[string]StepRecord
}

// StepRecord is one step's record in a row: the generation that recorded
// it, and its encoded result as recorded. The soak's steps each return a
// JSON string naming the generation that ran them ("g3" quoted).
type StepRecord struct {
	Gen   int64
	Value string
}

// StepName is the step every run of the soak's plain handlers reaches
// (framework.Step), whose reads and runs Run reports.
const StepName = "first"

// The results of a [Run]: what the handler returned.
const (
	ResultOK         = "ok"          // nil: complete
	ResultFail       = "fail"        // leasework.Permanent: FAILED
	ResultError      = "error"       // a retryable error: the policy's delay
	ResultRetryAfter = "retry-after" // leasework.RetryAfter: Delay
	ResultSnooze     = "snooze"      // leasework.Snooze: Delay, not a failure
)

// Run is one handler run, as its worker process recorded it: its start
// when the handler was called, its end just before the handler returned
// (before a Transactional handler's completion and commit).
type Run struct {
	Worker     string
	Row        int64
	EventID    string
	Kind       string
	Generation int64
	Start      time.Time
	End        time.Time // zero: no end recorded (the process died first, or the handler hung)
	Result     string    // one of the Result constants; empty without an end
	Delay      time.Duration
	Err        string // the error returned, for reports
	// StepRead is the generation whose record of the step (StepName) the
	// run got back from its claim, zero if it got none; StepRan, whether
	// it ran the step itself. A run that ended before the step did
	// neither.
	StepRead int64
	StepRan  bool
}

// Effect is a Transactional handler's business write, as it committed.
type Effect struct {
	EventID    string
	Row        int64
	Generation int64
	Worker     string
	Txid       int64
}

// The results of a [Cancel].
const (
	CancelOK       = "ok"       // it returned the row's new generation
	CancelFinished = "finished" // the event was finished already
	CancelUnknown  = "unknown"  // it failed: it may or may not have written
)

// Cancel is one call of lease.Store.Cancel by the test.
type Cancel struct {
	EventID           string
	Row               int64
	Invoked, Returned time.Time
	Result            string
	Generation        int64 // returned, with CancelOK
	// Stopping, with CancelOK: the cancel only marked the row of a
	// running attempt, whose generation it returned.
	Stopping bool
}

// Pause is one pause of a queue: PauseQueue returned at Paused, and
// ResumeQueue was called at Resumed (zero: never).
type Pause struct {
	Queue           string
	Paused, Resumed time.Time
}

// The scopes of a [Limit], as lease names them.
const (
	ScopeKind      = "kind"      // the attempts of one kind, in every queue
	ScopeQueue     = "queue"     // the attempts of one queue, of every kind
	ScopePartition = "partition" // the attempts of each partition: Name's, or every partition's ("")
)

// Limit is one setting of a concurrency limit by the test (lease's
// Store.SetLimit): claims that begin after it committed, somewhere between
// Invoked and Returned, admit an attempt of the kind (Scope [ScopeKind])
// or of the queue ([ScopeQueue]) Name only while fewer than Max are live;
// one of [ScopePartition], an attempt of partition Name, or of any
// partition that has no setting of its own when Name is empty (the
// default).
// A setting whose call failed and was made again, with the same Max, is
// one setting, from the first call's invocation to the return of the call
// that succeeded. Returned is zero when no call succeeded: the setting may
// have committed or not.
type Limit struct {
	Scope, Name       string
	Max               int
	Invoked, Returned time.Time
}

// RateLimit is one setting of a rate limit by the test (lease's
// Store.SetRateLimit): claims whose statement began after it committed,
// somewhere between Invoked and Returned, start attempts of the kind
// (Scope [ScopeKind]) or of the queue ([ScopeQueue]) Name, each taking its
// row's cost in starts, only while no window of Per that ends at the
// claim's statement time holds more than Max starts. A setting whose call
// failed and was made again, with the same Max and Per, is one setting,
// from the first call's invocation to the return of the call that
// succeeded. Returned is zero when no call succeeded: the setting may have
// committed or not.
type RateLimit struct {
	Scope, Name       string
	Max               int
	Per               time.Duration
	Invoked, Returned time.Time
}

// Process is one worker process.
type Process struct {
	// Exited is when the process was known to run no more code: just
	// after its SIGKILL was sent, or when it was seen to have exited.
	// Zero: it was never seen to stop.
	Exited time.Time
}

// Fault is one fault of the run: done to one worker, or to all (the
// server's restart or failover) when Worker is empty, from Start until the
// worker (every worker) had recovered, End (zero: never, as for a killed
// process).
type Fault struct {
	Kind       string
	Worker     string
	Start, End time.Time
}
