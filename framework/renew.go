package framework

import (
	"context"
	"time"

	"github.com/leasework/leasework"
)

// renewLoop renews every live claim of the worker with one statement per
// tick. A claim whose renewal the database rejects has its handler
// cancelled with leasework.ErrLeaseLost at once; a claim whose renewal cannot
// be confirmed at all (the database is unreachable) is given up by its
// watchdog at its local deadline, before the lease can have expired.
func (w *Worker) renewLoop(ctx context.Context) {
	every(ctx, w.cfg.RenewEvery, w.renew)
}

// every calls f every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

func (w *Worker) renew(ctx context.Context) {
	due := w.dueForRenewal(time.Now())
	if len(due) == 0 {
		return
	}
	refs := make([]leasework.Ref, len(due))
	for i, a := range due {
		refs[i] = a.ref
	}
	sctx, cancel := context.WithTimeout(ctx, w.statementTimeout())
	defer cancel()
	sent := time.Now() // before the statement: the new lease cannot start earlier
	res, err := w.store.RenewMany(sctx, refs, w.cfg.Lease)
	if err != nil {
		if ctx.Err() == nil { // not merely stopping
			w.log.Warn("renewal failed; claims not confirmed in time will be given up", "claims", len(refs), "err", err)
		}
		return
	}
	for i, r := range res {
		if r.Err != nil {
			due[i].lose("rejected renewal")
			continue
		}
		due[i].extend(sent)
	}
}

// dueForRenewal returns the live claims worth renewing now: those whose
// lease was last confirmed at least half a renewal period ago (a claim taken
// just before a tick waits for the next), and that the database has not
// already refused.
func (w *Worker) dueForRenewal(now time.Time) []*attempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	var due []*attempt
	for _, a := range w.live {
		_, confirmed, stale := a.state()
		if !stale && now.Sub(confirmed) >= w.cfg.RenewEvery/2 {
			due = append(due, a)
		}
	}
	return due
}
