package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
)

// Result reports what one guarded write did to one claim.
type Result struct {
	Ref leasework.Ref
	// Err is nil when the write was accepted and leasework.ErrLeaseLost when
	// the guard rejected it (newer generation, expired lease, or a row no
	// longer INPROGRESS).
	Err error
	// Status is the row's status after an accepted write.
	Status leasework.Status
	// LeaseUntil is the new deadline after an accepted renewal.
	LeaseUntil time.Time
	// AlreadyRecorded is set, with Err nil, when the guard rejected the
	// write but the row shows that this very claim's outcome is already
	// recorded: an earlier try of the same write committed though its reply
	// was lost (a statement timeout, a dropped connection). Status is then
	// the row's status. Such a write succeeded; it is not a stale rejection.
	AlreadyRecorded bool
	// Gone is set, with Err matching leasework.ErrLeaseLost, when the row no
	// longer exists: a completion deleted it (this claim's earlier try, or a
	// later claim's), or retention did. A caller whose lease cannot have
	// expired yet (its local deadline has not passed) knows it was its own
	// earlier try.
	Gone bool
}

// RetryRequest is one claim to send back for another attempt.
type RetryRequest struct {
	Ref   leasework.Ref
	Delay time.Duration // until the next attempt; zero or more
	Error string        // recorded as the row's last error
}

// FailRequest is one claim to end as FAILED.
type FailRequest struct {
	Ref    leasework.Ref
	Reason string // recorded as the row's last error
}

// Complete marks one claim DONE. It returns an error matching
// leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) Complete(ctx context.Context, ref leasework.Ref) error {
	return single(s.CompleteMany(ctx, []leasework.Ref{ref}))
}

// CompleteMany marks claims DONE in one statement and reports each one's
// result, in the order given.
func (s *Store) CompleteMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	ids, gens := splitRefs(refs)
	return s.guarded(ctx, "complete", refs, s.q.complete, s.drv.Array(ids), s.drv.Array(gens))
}

// CompleteAndDeleteMany completes claims of a table that keeps no history:
// each accepted claim's row is deleted instead of marked DONE, in one
// statement under the same guard as [Store.CompleteMany]. An accepted result
// reports Status DONE. Deleting forgets the event id, so a later enqueue of
// the same id is no longer a duplicate.
func (s *Store) CompleteAndDeleteMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	ids, gens := splitRefs(refs)
	return s.guarded(ctx, "complete", refs, s.q.completeDelete, s.drv.Array(ids), s.drv.Array(gens))
}

// Retry sends one claim back to READY, due after req.Delay. On the row's last
// allowed attempt it ends FAILED instead (the result's Status says which). It
// returns an error matching leasework.ErrLeaseLost when the claim is no longer
// owned.
func (s *Store) Retry(ctx context.Context, req RetryRequest) (leasework.Status, error) {
	res, err := s.RetryMany(ctx, []RetryRequest{req})
	if err != nil {
		return "", err
	}
	return res[0].Status, res[0].Err
}

// RetryMany is [Store.Retry] for many claims in one statement.
func (s *Store) RetryMany(ctx context.Context, reqs []RetryRequest) ([]Result, error) {
	refs, delays, errs, err := splitRetries(reqs)
	if err != nil {
		return nil, err
	}
	ids, gens := splitRefs(refs)
	a := s.drv.Array
	return s.guarded(ctx, "retry", refs, s.q.retry, a(ids), a(gens), a(delays), a(errs))
}

// Fail ends one claim as FAILED with reason. It returns an error matching
// leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) Fail(ctx context.Context, req FailRequest) error {
	return single(s.FailMany(ctx, []FailRequest{req}))
}

// FailMany is [Store.Fail] for many claims in one statement.
func (s *Store) FailMany(ctx context.Context, reqs []FailRequest) ([]Result, error) {
	refs := make([]leasework.Ref, len(reqs))
	reasons := make([]string, len(reqs))
	for i, r := range reqs {
		refs[i], reasons[i] = r.Ref, r.Reason
	}
	ids, gens := splitRefs(refs)
	a := s.drv.Array
	return s.guarded(ctx, "fail", refs, s.q.fail, a(ids), a(gens), a(reasons))
}

// Renew extends one claim's lease to lease from now (database time) and
// returns the new deadline. It returns an error matching
// leasework.ErrLeaseLost when the claim is no longer owned; an expired lease
// cannot be renewed.
func (s *Store) Renew(ctx context.Context, ref leasework.Ref, lease time.Duration) (time.Time, error) {
	res, err := s.RenewMany(ctx, []leasework.Ref{ref}, lease)
	if err != nil {
		return time.Time{}, err
	}
	return res[0].LeaseUntil, res[0].Err
}

// RenewMany renews many claims in one statement.
func (s *Store) RenewMany(ctx context.Context, refs []leasework.Ref, lease time.Duration) ([]Result, error) {
	if lease < time.Millisecond {
		return nil, fmt.Errorf("lease: renew: lease is %v; it must be at least 1ms", lease)
	}
	ids, gens := splitRefs(refs)
	return s.guarded(ctx, "renew", refs, s.q.renew, s.drv.Array(ids), s.drv.Array(gens), lease.Microseconds())
}

// Release gives one claim back to READY at once and returns the attempt it
// consumed, for a graceful shutdown; listening workers are notified. It
// returns an error matching leasework.ErrLeaseLost when the claim is no
// longer owned.
func (s *Store) Release(ctx context.Context, ref leasework.Ref) error {
	return single(s.ReleaseMany(ctx, []leasework.Ref{ref}))
}

// ReleaseMany is [Store.Release] for many claims in one statement.
func (s *Store) ReleaseMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	ids, gens := splitRefs(refs)
	return s.guarded(ctx, "release", refs, s.q.release, s.drv.Array(ids), s.drv.Array(gens), s.channel)
}

// SetProgress records progress for a claim under the ownership guard. The
// next attempt of the row receives it in Claim.Progress, so a long job can
// resume where it stopped. It returns an error matching
// leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) SetProgress(ctx context.Context, ref leasework.Ref, progress []byte) error {
	var id int64
	err := s.db.QueryRowContext(ctx, s.q.progress, ref.ID, ref.Generation, progress).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return lost("progress", ref)
	}
	if err != nil {
		return fmt.Errorf("lease: progress: %w", err)
	}
	return nil
}

// guarded runs one batched outcome statement and matches the rows it
// returned (id, generation, status or lease_until) to the refs asked for.
func (s *Store) guarded(ctx context.Context, op string, refs []leasework.Ref, query string, args ...any) ([]Result, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("lease: %s: %w", op, err)
	}
	defer rows.Close()
	type accepted struct {
		status     leasework.Status
		leaseUntil time.Time
	}
	got := make(map[leasework.Ref]accepted, len(refs))
	for rows.Next() {
		var ref leasework.Ref
		var a accepted
		var err error
		if op == "renew" {
			err = rows.Scan(&ref.ID, &ref.Generation, &a.leaseUntil)
			a.status = leasework.StatusInProgress
		} else {
			err = rows.Scan(&ref.ID, &ref.Generation, &a.status)
		}
		if err != nil {
			return nil, fmt.Errorf("lease: %s: %w", op, err)
		}
		got[ref] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: %s: %w", op, err)
	}
	out := make([]Result, len(refs))
	for i, ref := range refs {
		out[i].Ref = ref
		if a, ok := got[ref]; ok {
			out[i].Status, out[i].LeaseUntil = a.status, a.leaseUntil
		} else {
			out[i].Err = lost(op, ref)
		}
	}
	return out, nil
}

func lost(op string, ref leasework.Ref) error {
	return fmt.Errorf("lease: %s row %d generation %d: %w", op, ref.ID, ref.Generation, leasework.ErrLeaseLost)
}

func single(res []Result, err error) error {
	if err != nil {
		return err
	}
	return res[0].Err
}

func splitRefs(refs []leasework.Ref) (ids, gens []int64) {
	ids, gens = make([]int64, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ids[i], gens[i] = r.ID, r.Generation
	}
	return ids, gens
}

func splitRetries(reqs []RetryRequest) (refs []leasework.Ref, delays []int64, errs []string, err error) {
	refs = make([]leasework.Ref, len(reqs))
	delays, errs = make([]int64, len(reqs)), make([]string, len(reqs))
	for i, r := range reqs {
		if r.Delay < 0 {
			return nil, nil, nil, fmt.Errorf("lease: retry: row %d generation %d: Delay is %v; it must not be negative", r.Ref.ID, r.Ref.Generation, r.Delay)
		}
		refs[i], delays[i], errs[i] = r.Ref, r.Delay.Microseconds(), r.Error
	}
	return refs, delays, errs, nil
}
