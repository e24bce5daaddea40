package framework

// Listening returns a channel closed once w receives notifications, so that
// tests relying on a wakeup do not race the LISTEN.
func Listening(w *Worker) <-chan struct{} { return w.listening }
