package framework

// Listening returns a channel closed once w receives notifications, so that
// tests relying on a wakeup do not race the LISTEN.
func Listening(w *Worker) <-chan struct{} { return w.listening }

// QueuedOutcomes returns how many handler results wait for the outcome
// writer (not counting those in a write in flight).
func QueuedOutcomes(w *Worker) int { return w.outcomes.len() }
