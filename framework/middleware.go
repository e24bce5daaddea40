package framework

import (
	"errors"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/sourcegraph/conc/panics"
)

// Middleware wraps a handler: it returns the handler to run in next's place,
// which does its work around a call of next (or instead of it). Logging,
// tracing, metrics and authorization are middleware-shaped:
//
//	func logging(log *slog.Logger) framework.Middleware {
//		return func(next leasework.Handler) leasework.Handler {
//			return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
//				err := next.Handle(ctx, c)
//				log.Info("handled", "kind", c.Kind, "event_id", c.EventID, "err", err)
//				return err
//			})
//		}
//	}
//
// A middleware's panics are caught like a handler's, and what it returns is
// the attempt's result. A middleware that panics while it wraps a handler,
// or returns nil, makes Run return an error naming it.
type Middleware func(next leasework.Handler) leasework.Handler

// Use adds middleware around every handler of the worker, Transactional
// ones included. The first given is the outermost, and middleware given in
// an earlier call wraps middleware given in a later one: Use(a); Use(b)
// runs a, then b, then the handler. Call it before Run; it returns an
// error, and adds nothing, once Run has started or when a middleware is
// nil.
func (w *Worker) Use(mw ...Middleware) error {
	for i, m := range mw {
		if m == nil {
			return fmt.Errorf("framework: Use: middleware %d is nil", i)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("framework: Use: the worker is already running")
	}
	w.middleware = append(w.middleware, mw...)
	return nil
}

// wrap returns h inside the worker's middleware, the first outermost. A
// middleware that panics while it wraps, or returns no handler, is an
// error naming it.
func (w *Worker) wrap(kind string, h leasework.Handler) (leasework.Handler, error) {
	for i := len(w.middleware) - 1; i >= 0; i-- {
		var pc panics.Catcher
		pc.Try(func() { h = w.middleware[i](h) })
		if r := pc.Recovered(); r != nil {
			return nil, fmt.Errorf("framework: Run: middleware %d panicked wrapping the handler of %q: %v", i, kind, r.Value)
		}
		if isNilHandler(h) {
			return nil, fmt.Errorf("framework: Run: middleware %d returned no handler for %q", i, kind)
		}
	}
	return h, nil
}
