package framework

import (
	"context"
	"fmt"
	"slices"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// HandleKind registers fn for the events of kind k, with opts: each
// claim's payload is decoded with k's codec and handed to fn with the
// claim. A payload that does not decode fails its event at once (as
// [leasework.Permanent]: it never will decode). It refuses what
// [Worker.RegisterWith] refuses, and a kind whose queue the worker does not
// serve (Config.Queues): its events would never be claimed here.
func HandleKind[T any](w *Worker, k lease.Kind[T], fn func(ctx context.Context, c *leasework.Claim, args T) error, opts KindOptions) error {
	if fn == nil {
		return fmt.Errorf("framework: Register %q: handler is nil", k.Name)
	}
	queue := k.Queue
	if queue == "" {
		queue = lease.DefaultQueue
	}
	if !slices.ContainsFunc(w.cfg.Queues, func(q Queue) bool { return q.Name == queue }) {
		return fmt.Errorf("framework: Register %q: the kind's queue %q is not one this worker serves (Config.Queues)", k.Name, queue)
	}
	return w.RegisterWith(k.Name, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		args, err := k.Decode(c.Payload)
		if err != nil {
			return leasework.Permanent(err)
		}
		return fn(ctx, c, args)
	}), opts)
}
