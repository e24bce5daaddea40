package framework

import (
	"context"
	"time"

	"github.com/leasework/leasework/lease"
)

// writeTakingTurns writes a batch of outcomes, and runs the events whose
// turn its completions give. A completion of a keyed claim passes the key
// on to the key's next event; when that event is one this worker's claim
// of the claim's queue could take now, the completion's statement claims
// it for the worker (lease.Store.WriteManyTakingTurns), which starts it as
// it starts the claims of its claim loop, without the claim statement and
// the write that made the event READY. Likewise a completion under a
// concurrency limit hands its place on to the queue's next due event,
// claimed in the same statement, so that the place is never idle between
// the commit that gives it back and a claim. It asks so only for one
// queue: of the queues with keyed completions in the batch, the one with
// the most, while its last claim found fewer rows than it could take (no
// due event of the queue is waiting for a claim, so a next event taken
// now overtakes none); else, of the queues whose last claim a limit held
// back, the one with the most completions (the events it hands places on
// to are the next its claim would take). It asks for at most as many
// events as the queue has free slots, which it holds until the statement
// returns, and not once the worker has begun to stop (its claim loop may
// still be in a claim then). Otherwise it is WriteMany.
func (w *Worker) writeTakingTurns(ctx context.Context, batch []outcome, writes []lease.Write) ([]lease.Result, error) {
	q := w.turnsQueue(batch)
	if q == nil {
		return w.store.WriteMany(ctx, writes...)
	}
	limited := q.limited.Load()
	keyed := 0
	for _, o := range batch {
		if o.a.q == q && (o.a.claim.Key != "" || limited) && completes(o) {
			keyed++
		}
	}
	w.mu.Lock()
	stopping := w.stopping || w.stopped
	w.mu.Unlock()
	if stopping {
		return w.store.WriteMany(ctx, writes...)
	}
	reserved := w.reserveSlots(q, keyed)
	if reserved == 0 {
		return w.store.WriteMany(ctx, writes...)
	}
	sent := time.Now()
	res, claims, err := w.store.WriteManyTakingTurns(ctx, lease.ClaimRequest{
		Limit: reserved, Lease: w.cfg.Lease, Kinds: w.kindList, Worker: w.cfg.WorkerID, Queue: q.name,
	}, writes...)
	returned := time.Now()
	w.unreserveSlots(q, reserved-len(claims))
	for _, c := range claims {
		w.startAttempt(q, c, sent, returned, true)
	}
	return res, err
}

// turnsQueue returns the queue whose completions in batch may take the
// turns they pass on, or hand their places on: of the queues with keyed
// completions in it, the one with the most, if its last claim came back
// short; else, of the queues whose last claim a concurrency limit held
// back, the one with the most completions; nil for none.
func (w *Worker) turnsQueue(batch []outcome) *queue {
	keyed, limited := map[*queue]int{}, map[*queue]int{}
	var best, bestLimited *queue
	for _, o := range batch {
		if !completes(o) {
			continue
		}
		q := o.a.q
		if o.a.claim.Key != "" {
			keyed[q]++
			if best == nil || keyed[q] > keyed[best] {
				best = q
			}
		}
		if q.limited.Load() {
			limited[q]++
			if bestLimited == nil || limited[q] > limited[bestLimited] {
				bestLimited = q
			}
		}
	}
	if best != nil && best.drained.Load() {
		return best
	}
	return bestLimited
}

// completes says whether o completes its claim.
func completes(o outcome) bool {
	return o.op() == lease.OpComplete || o.op() == lease.OpCompleteAndDelete
}
