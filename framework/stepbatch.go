package framework

import (
	"context"
	"sync"
	"time"

	"github.com/leasework/leasework/lease"
)

// The bounds of one statement of step records (stepBatcher): its steps,
// and the bytes of their results.
const (
	maxStepBatch      = 500
	maxStepBatchBytes = 4 << 20
)

// stepBatcher writes the step records of a worker's handlers, those made
// outside a transaction (Step), in batches: each record waits for the
// statement that carries it, and the records made while one statement
// runs go together in the next. A thousand handlers recording a step at
// once cost a few statements and connections, not a thousand. One
// statement runs at a time; a goroutine runs them while records wait, and
// ends when none does.
type stepBatcher struct {
	store   *lease.Store
	timeout time.Duration // of a statement

	mu       sync.Mutex
	pending  []*stepCall
	flushing bool
}

// stepCall is one record waiting for its statement.
type stepCall struct {
	w        lease.Write
	deadline time.Time // the claim's local lease deadline
	done     chan error
}

// write records w, whose claim is owned until deadline (local clock),
// and returns its error: nil once recorded, one matching
// leasework.ErrLeaseLost (or ErrCancelled) when rejected, or the
// statement's error.
func (b *stepBatcher) write(w lease.Write, deadline time.Time) error {
	c := &stepCall{w: w, deadline: deadline, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if !b.flushing {
		b.flushing = true
		go b.drain()
	}
	b.mu.Unlock()
	return <-c.done
}

// drain runs statements until no record waits.
func (b *stepBatcher) drain() {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(b.pending) && n < maxStepBatch && (n == 0 || size+len(b.pending[n].w.Data()) <= maxStepBatchBytes) {
			size += len(b.pending[n].w.Data())
			n++
		}
		batch := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.mu.Unlock()
		b.flush(batch)
	}
}

// flush writes one batch in one statement (lease.Store.WriteMany puts a
// claim's second step of a batch in a second one), bounded by the latest
// deadline of its claims and the statement timeout; a record whose
// deadline passed while it waited is still sent: the database decides.
func (b *stepBatcher) flush(batch []*stepCall) {
	writes := make([]lease.Write, len(batch))
	latest := time.Now()
	for i, c := range batch {
		writes[i] = c.w
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if bound := time.Now().Add(b.timeout); bound.Before(latest) {
		latest = bound
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	res, err := b.store.WriteMany(ctx, writes...)
	for i, c := range batch {
		switch {
		case err != nil:
			c.done <- err
		default:
			c.done <- res[i].Err
		}
	}
}
