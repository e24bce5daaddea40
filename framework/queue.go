package framework

import (
	"sync/atomic"
	"time"
)

// queue is one queue the worker serves (Config.Queues): its handler slots,
// the claims it holds, and the wakeups of its claim loop. Each queue has
// its own claim loop, so a queue whose slots are full never holds another
// back.
type queue struct {
	name        string
	concurrency int
	running     int           // handlers running; under Worker.mu
	held        int           // claims held, running or waiting for their outcome; under Worker.mu
	loopClaim   int           // the free slots its claim loop's claim in flight may fill; under Worker.mu
	wake        chan struct{} // a notification; capacity 1
	slotFreed   chan struct{} // a handler returned or an outcome was written; capacity 1
	floors      floors        // where its claims start reading; shared by its claim loop and its sweep
	drained     atomic.Bool   // its last claim found fewer rows than it could take (see writeTakingTurns)
	// limited: a concurrency limit held back its last claim that took
	// rows (an empty claim leaves it: the statement says so with its
	// rows). Its outcomes then wake its claim loop as they are written:
	// each may have given a slot back, and a claim need not wait for the
	// notification to come back through the server.
	limited  atomic.Bool
	wakeFrom time.Time // the earliest running lease its last next wake found: the next one's floor; its claim loop's own
}

func newQueue(q Queue) *queue {
	return &queue{
		name:        q.Name,
		concurrency: q.Concurrency,
		wake:        make(chan struct{}, 1),
		slotFreed:   make(chan struct{}, 1),
	}
}

// wakeAfter wakes q's claim loop once d has passed, when that comes before
// its next poll: a retry or snooze this worker has written comes due then,
// and nothing notifies it. It is armed once the write is recorded, never
// when the outcome is decided: a wake that came while the row was still
// in progress would find nothing, and the worker would sleep until the
// row's lease ran out. (Another worker's are found when this one is idle:
// see untilNextWake.) A wake with nothing to claim costs one empty claim.
func (w *Worker) wakeAfter(q *queue, d time.Duration) {
	if d >= w.cfg.PollInterval {
		return
	}
	time.AfterFunc(d+wakeSlack, func() { signal(q.wake) })
}

// wakeAll wakes the claim loop of every queue: a notification names a
// kind, and a kind may be enqueued into any queue.
func (w *Worker) wakeAll() {
	for _, q := range w.queues {
		signal(q.wake)
	}
}
