package framework

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

type op int

const (
	opComplete op = iota
	opRetry
	opFail
	opRelease
	numOps
)

var opNames = [numOps]string{"complete", "retry", "fail", "release"}

// outcome is what to write for one finished attempt.
type outcome struct {
	a     *attempt
	op    op
	delay time.Duration // opRetry
	text  string        // opRetry, opFail: the error recorded in the row
	tries int           // failed writes so far
}

// maxOutcomeTries bounds the writes of one outcome that fail with a
// database error. Past it, or past the claim's local deadline, the outcome
// is abandoned: the lease expires and another worker claims the row again.
const maxOutcomeTries = 8

// writeOutcomes writes handler results until the outcomes channel is
// closed and everything in it is written or abandoned.
//
// It batches like a group commit: an outcome arriving at an idle writer is
// written at once, and those arriving while a write is in flight go out
// together in the next one, one statement per kind of outcome. Under load
// that is one round trip per batch, with no timer adding latency.
func (w *Worker) writeOutcomes() {
	var pending []outcome
	in := w.outcomes
	retryWait := &backoff.ExponentialBackOff{
		InitialInterval: 10 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2,
		MaxInterval: time.Second, Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	retryWait.Reset()
	for in != nil || len(pending) > 0 {
		if len(pending) == 0 {
			o, ok := <-in
			if !ok {
				return
			}
			pending = append(pending, o)
		}
	drain:
		for in != nil {
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					break drain
				}
				pending = append(pending, o)
			default:
				break drain
			}
		}
		pending = w.flush(pending)
		if len(pending) == 0 {
			retryWait.Reset()
			continue
		}
		// Some writes failed: wait before trying again, taking in new
		// outcomes meanwhile.
		t := time.NewTimer(retryWait.NextBackOff())
	wait:
		for {
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				pending = append(pending, o)
			case <-t.C:
				break wait
			}
		}
	}
}

// flush writes pending outcomes, one statement per kind of outcome, and
// returns those to try again.
func (w *Worker) flush(pending []outcome) []outcome {
	var groups [numOps][]outcome
	for _, o := range pending {
		groups[o.op] = append(groups[o.op], o)
	}
	var again []outcome
	for i, group := range groups {
		if len(group) == 0 {
			continue
		}
		res, err := w.writeGroup(op(i), group)
		if err != nil {
			w.log.Warn("outcome write failed", "op", opNames[i], "claims", len(group), "err", err)
			again = append(again, w.keepForRetry(group)...)
			continue
		}
		for i, r := range res {
			w.recorded(group[i], r)
		}
	}
	return again
}

func (w *Worker) writeGroup(o op, group []outcome) ([]lease.Result, error) {
	ctx, cancel := context.WithTimeout(w.dbCtx, w.statementTimeout())
	defer cancel()
	s := w.store
	switch o {
	case opComplete:
		refs := refsOf(group)
		if w.cfg.Retention == 0 {
			return s.CompleteAndDeleteMany(ctx, refs)
		}
		return s.CompleteMany(ctx, refs)
	case opRetry:
		reqs := make([]lease.RetryRequest, len(group))
		for i, g := range group {
			reqs[i] = lease.RetryRequest{Ref: g.a.ref, Delay: g.delay, Error: g.text}
		}
		return s.RetryMany(ctx, reqs)
	case opFail:
		reqs := make([]lease.FailRequest, len(group))
		for i, g := range group {
			reqs[i] = lease.FailRequest{Ref: g.a.ref, Reason: g.text}
		}
		return s.FailMany(ctx, reqs)
	default:
		return s.ReleaseMany(ctx, refsOf(group))
	}
}

// keepForRetry returns the outcomes of a failed write that are still worth
// writing, and abandons the others.
func (w *Worker) keepForRetry(group []outcome) []outcome {
	var keep []outcome
	now := time.Now()
	for _, o := range group {
		o.tries++
		deadline, _, _ := o.a.state()
		if o.tries < maxOutcomeTries && now.Before(deadline) {
			keep = append(keep, o)
			continue
		}
		w.count.outcomesAbandoned.Add(1)
		w.log.Error("outcome not recorded; the lease will expire and the event will be claimed again",
			"op", opNames[o.op], "id", o.a.ref.ID, "generation", o.a.ref.Generation, "event_id", o.a.claim.EventID)
		w.forget(o.a)
	}
	return keep
}

// recorded counts and logs the database's answer to one outcome write.
func (w *Worker) recorded(o outcome, r lease.Result) {
	a := o.a
	defer w.forget(a)
	if r.Err != nil {
		w.count.staleRejections.Add(1)
		w.log.Warn("outcome rejected: the claim is no longer owned", "op", opNames[o.op],
			"id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID)
		return
	}
	log := w.log.With("id", a.ref.ID, "generation", a.ref.Generation, "event_id", a.claim.EventID, "attempt", a.claim.Attempt)
	switch {
	case o.op == opComplete:
		w.count.completed.Add(1)
		log.Debug("event completed")
	case o.op == opRelease:
		w.count.released.Add(1)
		log.Debug("claim released")
	case o.op == opRetry && r.Status == leasework.StatusReady:
		w.count.retried.Add(1)
		log.Info("attempt failed; will retry", "delay", o.delay, "err", o.text)
	default: // fail, or retry on the row's last allowed attempt
		w.count.failed.Add(1)
		log.Warn("event failed", "err", o.text)
	}
}

// forget drops a claim whose outcome is settled.
func (w *Worker) forget(a *attempt) {
	w.mu.Lock()
	delete(w.live, a.ref)
	w.mu.Unlock()
}

func refsOf(group []outcome) []leasework.Ref {
	refs := make([]leasework.Ref, len(group))
	for i, g := range group {
		refs[i] = g.a.ref
	}
	return refs
}
