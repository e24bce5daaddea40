package framework

import (
	"context"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// renewLoop renews the worker's live claims, each once its last confirmed
// claim or renewal is RenewEvery old; the claims falling due at one tick
// share one statement. A claim whose renewal the database rejects has its
// handler cancelled with leasework.ErrLeaseLost at once; a claim whose
// renewal cannot be confirmed at all (the database is unreachable) is given
// up by its watchdog at its local deadline, before the lease can have
// expired. A claim whose handler returned is renewed until its outcome is
// written or given up, so that an outcome waiting out an outage keeps its
// lease for as long as the database confirms it.
func (w *Worker) renewLoop(ctx context.Context) {
	every(ctx, w.renewTick(), w.renew)
}

// renewTick is the period of the renewal loop: half of RenewEvery, so that
// a claim is renewed at an age between RenewEvery/2 and RenewEvery, however
// its claim falls between two ticks.
func (w *Worker) renewTick() time.Duration { return w.cfg.RenewEvery / 2 }

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
	writes := make([]lease.Write, len(due))
	for i, a := range due {
		writes[i] = lease.Renew(a.ref, w.cfg.Lease)
	}
	sctx, cancel := context.WithTimeout(ctx, w.cfg.statementTimeout())
	defer cancel()
	sent := time.Now() // before the statement: the new lease cannot start earlier
	res, err := w.store.WriteMany(sctx, writes...)
	if err == nil && len(res) > 0 && res[0].Verdict == lease.VerdictNoAnswer {
		err = res[0].Err // one statement: all of them failed
	}
	if err != nil {
		if ctx.Err() == nil { // not merely stopping
			w.log.Warn("renewal failed; claims not confirmed in time will be given up", "claims", len(writes), "err", err)
		}
		return
	}
	for i, r := range res {
		switch {
		case r.Verdict == lease.VerdictBusy:
			// The row is locked by another transaction, most often the
			// claim's own handler completing it: neither renewed nor lost.
			continue
		case r.Err != nil && due[i].txPhase() != txNone:
			// The handler's transaction completed the claim and holds or
			// held the row: a rejection means its COMMIT made the row DONE.
			continue
		case r.Verdict == lease.VerdictCancelled:
			due[i].lose("rejected renewal", leasework.ErrCancelled)
			continue
		case r.Err != nil:
			due[i].lose("rejected renewal", leasework.ErrLeaseLost)
			continue
		}
		due[i].extend(sent)
	}
}

// dueForRenewal returns the live claims to renew at a tick at now: those
// still worth renewing (see attempt.renewable) whose last confirmation
// would be older than RenewEvery at the next tick. Renewing them now
// rather than at that tick keeps every claim's age at its renewal at most
// RenewEvery (at most Lease/2), far from the local deadline at 0.9 × Lease.
func (w *Worker) dueForRenewal(now time.Time) []*attempt {
	tick := w.renewTick()
	w.mu.Lock()
	defer w.mu.Unlock()
	var due []*attempt
	for _, a := range w.live {
		_, confirmed, _ := a.state()
		if now.Sub(confirmed)+tick > w.cfg.RenewEvery && a.renewable() {
			due = append(due, a)
		}
	}
	return due
}
