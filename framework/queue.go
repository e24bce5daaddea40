package framework

// queue is one queue the worker serves (Config.Queues): its handler slots,
// the claims it holds, and the wakeups of its claim loop. Each queue has
// its own claim loop, so a queue whose slots are full never holds another
// back.
type queue struct {
	name        string
	concurrency int
	running     int           // handlers running; under Worker.mu
	held        int           // claims held, running or waiting for their outcome; under Worker.mu
	wake        chan struct{} // a notification; capacity 1
	slotFreed   chan struct{} // a handler returned or an outcome was written; capacity 1
}

func newQueue(q Queue) *queue {
	return &queue{
		name:        q.Name,
		concurrency: q.Concurrency,
		wake:        make(chan struct{}, 1),
		slotFreed:   make(chan struct{}, 1),
	}
}

// wakeAll wakes the claim loop of every queue: a notification names a
// kind, and a kind may be enqueued into any queue.
func (w *Worker) wakeAll() {
	for _, q := range w.queues {
		signal(q.wake)
	}
}
