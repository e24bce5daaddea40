package leasework

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrLeaseLost is returned by an outcome write (complete, retry, fail,
	// renew, release, progress) that found the claim no longer owned: a newer
	// generation claimed the row, the lease expired, or the row is already in
	// a terminal state. The write changed nothing, and the caller must not
	// follow it with an unguarded write. It is also the context cause of a
	// handler whose lease was lost.
	ErrLeaseLost = errors.New("leasework: lease lost")

	// ErrDuplicateEvent is returned by enqueue when an event id already exists
	// in the table (or twice in one call). Nothing was overwritten. An id
	// exists while its row does: pending, FAILED, or DONE until retention
	// deletes it. The framework keeps DONE rows for its dedupe window (24
	// hours) by default, so a completed event enqueued again within it is
	// refused; a table whose rows are deleted at completion
	// (framework.Config.DeleteAtCompletion) accepts it as a new event.
	ErrDuplicateEvent = errors.New("leasework: duplicate event id")

	// ErrShutdown is the context cause of a handler cancelled because its
	// worker is stopping.
	ErrShutdown = errors.New("leasework: worker shutting down")

	// ErrAttemptTimeout is the context cause of a handler that ran past its
	// per-attempt timeout.
	ErrAttemptTimeout = errors.New("leasework: attempt timed out")

	// ErrCancelled is the context cause of a handler whose event was
	// cancelled from outside while it ran (lease.Store.Cancel, leasework
	// cancel): the event ended at once, its generation moved on, and every
	// later write of the attempt is rejected. It also matches ErrLeaseLost.
	ErrCancelled error = &lostLease{"leasework: event cancelled"}

	// ErrLeaseUnconfirmed is the context cause of a handler whose worker
	// gave its claim up because no renewal was confirmed before the lease's
	// local deadline: the database was unreachable or too slow, and another
	// worker may own the row by now, or not yet. It also matches
	// ErrLeaseLost. A claim the database itself rejected has cause
	// ErrLeaseLost (or ErrCancelled).
	ErrLeaseUnconfirmed error = &lostLease{"leasework: lease not confirmed in time"}
)

// lostLease is a reason a lease was lost that errors.Is also matches to
// ErrLeaseLost, so that callers who only ask "is my lease gone?" need not
// know every reason.
type lostLease struct{ msg string }

func (e *lostLease) Error() string        { return e.msg }
func (e *lostLease) Is(target error) bool { return target == ErrLeaseLost }

// PermanentError marks an error that must not be retried. Create it with
// [Permanent].
type PermanentError struct {
	Err error
}

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent error"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the event is marked FAILED instead of retried.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or any error it wraps, was made by
// [Permanent].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// SnoozeError asks the worker to run the event again after Delay, without
// counting the attempt as a failure. Create it with [Snooze].
type SnoozeError struct {
	Delay time.Duration
}

// Error says for how long.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.Delay) }

// Snooze returns the error a handler returns to run its event again after
// d, as River's JobSnooze: not a failure. The event goes back to READY,
// due in d (a negative d is zero), under the ownership guard like any
// outcome; its last error is kept, and its attempt budget grows by one, so
// that a snooze never spends it. The next claim counts it in
// [Claim.Snoozes], and the retry policy, which counts [Claim.Failures],
// never sees it: neither its cap nor its backoff grows with snoozes
// (Claim.Attempt still counts every claim). Wrapped in [Permanent] it is a
// failure like any other.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// RetryAfterError is a handler's error with the delay before its retry
// chosen by the handler. Create it with [RetryAfter].
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

// Error returns the wrapped error's text.
func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %v", e.Delay)
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns err with the delay before its retry set to d,
// overriding the retry policy's backoff for this attempt, as Temporal's
// NextRetryDelay does (a server's Retry-After, say). The attempt is a
// failure like any other: it counts against the budget, and the policy's
// attempt limit still applies. A negative d is zero. RetryAfter(nil, d)
// returns nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: d}
}

// PanicError is the error recorded for an attempt whose handler panicked.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic
}

// Error returns the panic value and the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("handler panicked: %v\n%s", e.Value, e.Stack)
}
