package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/leasework/leasework"
)

// failAfterAckOnce fails the first attempt that the broker acknowledged, as
// if the worker had died between the acknowledgment and its DONE write, but
// without killing anything. The worker retries the event and publishes it
// again under generation 2, and the consumer skips the duplicate. It is the
// -redeliver flag.
type failAfterAckOnce struct {
	next leasework.Handler
	p    *printer
	done atomic.Bool
}

func (f *failAfterAckOnce) Handle(ctx context.Context, c *leasework.Claim) error {
	if err := f.next.Handle(ctx, c); err != nil {
		return err
	}
	if f.done.CompareAndSwap(false, true) {
		f.p.printf("-redeliver: %s generation %d was acknowledged; failing the attempt anyway, so it is published again", c.EventID, c.Generation)
		return errors.New("-redeliver: attempt failed on purpose after the broker acknowledged the record")
	}
	return nil
}
