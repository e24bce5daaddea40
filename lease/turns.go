package lease

import (
	"context"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// WriteManyTakingTurns is [Store.WriteMany] for a worker that runs the
// events whose turn its completions give: a completion of a keyed event
// passes the key on to the key's next event (see Order per key in the
// package doc), and here, in the same statement and under the same locks,
// claims it for the caller when a claim of req could take it now: of
// req.Queue, of one of req.Kinds (any kind when there are none), due, its
// queue not paused; at most req.Limit of them, fewest priority and
// earliest due first. Each is claimed as [Store.Claim] claims (INPROGRESS
// under a lease of req.Lease owned by req.Worker, the next generation, one
// more attempt), and returned, committed with the completions; run each as
// a claim of [Store.Claim]. The next events it does not claim become READY
// as with WriteMany. req.DueFrom is not read. A next event it takes may
// have waited a shorter time than a READY event of its queue that a claim
// would take before it: ask for turns (a Limit above zero) while a claim
// of the queue finds no more due events than it asks for, and they come
// in no one's way.
//
// Under concurrency limits ([Store.SetLimit]) a completion also hands the
// places its rows held on to the next due events of req.Queue that a
// claim of req would take, claimed in the same statement (at most
// req.Limit with the turns taken): the next event of a kind takes a place
// of its kind's limit a completed row held, and of its queue's limit when
// the queue has one; an event over no limit, or a limit with no place
// freed, is left to claims. A place handed on is never free, so the
// limit's slots are not written; the others are given back. A place in a
// slot past its share (a lowered limit's) is given back, not handed on.
// These events are the ones a claim would take next, and overtake none.
//
// The results are WriteMany's. A claim it cannot decode is settled as
// [Store.Claim] settles one, and not returned. With req.Limit zero or
// less it is WriteMany and claims nothing; a req out of range otherwise
// (see [ClaimRequest]) is an error, and nothing is written.
func (s *Store) WriteManyTakingTurns(ctx context.Context, req ClaimRequest, writes ...Write) ([]Result, []leasework.Claim, error) {
	if req.Limit <= 0 {
		res, err := s.WriteMany(ctx, writes...)
		return res, nil, err
	}
	claimArgs, err := s.claimArgs(req)
	if err != nil {
		return nil, nil, fmt.Errorf("lease: write taking turns: %w", errprefix.Trim("lease: ", err))
	}
	for _, w := range writes {
		if err := w.check(); err != nil {
			return nil, nil, err
		}
	}
	out := make([]Result, len(writes))
	for i, w := range writes {
		out[i] = Result{Op: w.op, Ref: w.ref}
	}
	var rejected []int
	var claims []leasework.Claim
	var bad []Write
	limit := req.Limit
	for _, group := range groups(writes) {
		op := writes[group[0]].op
		if limit <= 0 || (op != OpComplete && op != OpCompleteAndDelete) {
			rejected = append(rejected, s.writeGroup(ctx, writes, group, out)...)
			continue
		}
		_, args := s.statement(writes, group, false)
		query := s.q.completeTaking
		if op == OpCompleteAndDelete {
			query = s.q.completeDeleteTaking
		}
		// claimArgs: limit, kinds, lease, worker, queue, floors.
		args = append(args, claimArgs[4], limit, claimArgs[1], claimArgs[2], claimArgs[3])
		accepted, took, undecodable, err := s.runTaking(ctx, query, args, len(group))
		rejected = append(rejected, s.judgeGroup(writes, group, out, accepted, nil, err)...)
		claims, bad = append(claims, took...), append(bad, undecodable...)
		limit -= len(took) + len(undecodable)
	}
	if len(bad) > 0 {
		// The claims are committed, and the caller's whatever becomes of
		// this write, as in Claim.
		_ = s.settleUndecodable(ctx, s.db, bad)
	}
	if len(rejected) > 0 {
		s.settleRejected(ctx, writes, out, rejected)
	}
	return out, claims, nil
}

// runTaking runs a completion statement that takes turns (takingTurns)
// and reads what it returned: the finished rows, and the claims, decoded
// column by column as scanClaims decodes a claim's, apart from those it
// cannot decode, each with the failure to settle it with.
func (s *Store) runTaking(ctx context.Context, query string, args []any, n int) (accepted map[leasework.Ref]answer,
	claims []leasework.Claim, bad []Write, err error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	accepted = make(map[leasework.Ref]answer, n)
	for rows.Next() {
		var taken bool
		var c leasework.Claim
		var status leasework.Status
		var meta, steps string
		var d decoder
		if err := rows.Scan(&taken, &c.ID, &c.Generation, &status, col(&d, "event_id", &c.EventID), col(&d, "kind", &c.Kind),
			col(&d, "key", &c.Key), col(&d, "payload", &c.Payload), col(&d, "attempt", &c.Attempt),
			col(&d, "max_attempts", &c.MaxAttempts), col(&d, "lease_until", &c.LeaseUntil),
			col(&d, "progress", &c.Progress), col(&d, "last_error", &c.LastError), col(&d, "queue", &c.Queue),
			col(&d, "priority", &c.Priority), col(&d, "next_attempt_at", &c.DueAt), col(&d, "metadata", &meta),
			col(&d, "snoozes", &c.Snoozes), col(&d, "steps", &steps)); err != nil {
			return nil, nil, nil, err
		}
		if !taken {
			accepted[leasework.Ref{ID: c.ID, Generation: c.Generation}] = answer{status: status}
			continue
		}
		d.metadata(meta, &c.Metadata)
		d.claimSteps(steps, &c.Steps)
		if err := d.err(); err != nil {
			bad = append(bad, Fail(c.Ref(), "claim: "+err.Error()))
			continue
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	return accepted, claims, bad, nil
}
