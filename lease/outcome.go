package lease

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/errprefix"
)

// Result reports what one guarded write did to one claim.
//
// When the guard rejects a write, the store reads the rejected rows again
// (one more query, by id) to tell three cases apart:
//
//   - the row shows this claim's own outcome of the same kind, recorded by an
//     earlier try whose reply was lost: AlreadyRecorded, Err nil;
//   - the row no longer exists: Gone, Err matching leasework.ErrLeaseLost;
//   - anything else (a newer generation, an expired lease, another outcome):
//     Err matching leasework.ErrLeaseLost only.
//
// "This claim's own outcome" is decided from what the write would have
// left, compared with the row: always its generation, which only claims and
// requeues change (both raise it), so a finished row at the claim's
// generation was finished by that claim or by the claim statement expiring
// it. Then, per write:
//
//   - complete: status DONE (only a completion makes DONE);
//   - retry: status READY or FAILED, and last_error equal to the text this
//     retry stores (a lease that expired on the last attempt also leaves
//     FAILED at the same generation, with its own text);
//   - fail: status FAILED and last_error equal to the reason this write
//     stores;
//   - release: status READY. A release also gives back the attempt and
//     clears the worker, so neither tells anything; a READY row at the
//     claim's generation was put there by that claim (a retry does too, but
//     one claim records one outcome);
//   - renew: never; a renewal leaves nothing to recognise it by.
//
// A row that moved on after the earlier try (claimed again, requeued) is
// plain ErrLeaseLost.
type Result struct {
	Ref leasework.Ref
	// Err is nil when the write was accepted or AlreadyRecorded, and matches
	// leasework.ErrLeaseLost when the guard rejected it (newer generation,
	// expired lease, a row no longer INPROGRESS, or no row at all).
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
	// Busy is set, with Err matching [ErrRowBusy] and not
	// leasework.ErrLeaseLost, on a renewal that skipped its row because
	// another transaction holds the row's lock: most often the claim's own
	// handler, completing it in its transaction ([Store.CompleteTx]). The
	// lease was neither renewed nor found lost; renew again later. Only
	// renewals report Busy: the other writes wait for the lock.
	Busy bool
	// Cancelled is set, with Err matching leasework.ErrCancelled (and so
	// leasework.ErrLeaseLost), when the write was rejected because the
	// event was cancelled after the claim took it ([Store.Cancel]). A
	// rejected outcome write (any but a renewal) of the attempt the cancel
	// found running is taken as that attempt's stop: the event, still
	// INPROGRESS until then, ends DISCARDED, and a keyed event passes its
	// key on.
	Cancelled bool
	// DoneByClaim is set on a rejected write (Err not nil) whose row is
	// DONE at the claim's generation: the claim's completion is recorded,
	// by another write than this one (for a retry after a completion in the
	// handler's own transaction whose COMMIT lost its reply, say). A
	// completion in that case is AlreadyRecorded instead, with Err nil.
	DoneByClaim bool
}

// ErrRowBusy is matched by the error of a renewal that skipped its row
// because another transaction holds its lock (see [Result].Busy). It does
// not match leasework.ErrLeaseLost: the claim is not known to be lost.
var ErrRowBusy = errors.New("lease: row locked by another transaction")

// RetryRequest is one claim to send back for another attempt.
type RetryRequest struct {
	Ref   leasework.Ref
	Delay time.Duration // until the next attempt; zero or more
	// Error is recorded as the row's last error, made storable by
	// [CleanText] with [MaxErrorBytes]: any text is accepted. For a
	// snooze, give the claim's LastError to keep it.
	Error string
	// Snooze makes the attempt not count: the row's attempt budget grows
	// by one, so the row goes back to READY whatever attempt it is on, and
	// its snooze count by one, so the next claim's leasework.Claim.Snoozes
	// tells it from a failure (leasework.Snooze).
	Snooze bool
}

// FailRequest is one claim to end as FAILED.
type FailRequest struct {
	Ref leasework.Ref
	// Reason is recorded as the row's last error, made storable by
	// [CleanText] with [MaxErrorBytes]: any text is accepted.
	Reason string
}

// Complete marks one claim DONE. It returns nil when the claim's completion
// is recorded, by this call or by an earlier try of it (see [Result]), and an
// error matching leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) Complete(ctx context.Context, ref leasework.Ref) error {
	return single(s.CompleteMany(ctx, []leasework.Ref{ref}))
}

// CompleteMany marks claims DONE in one statement and reports each one's
// result, in the order given.
//
// Every batched write (CompleteMany, CompleteAndDeleteMany, RetryMany,
// FailMany, RenewMany, ReleaseMany) locks its rows in id order before it
// writes them, so concurrent batches over the same rows, in any order, wait
// for each other instead of deadlocking. A batch may name a row more than
// once; each entry gets a result.
//
// It returns an error, and no results, when the statement fails, or when
// reading the rows the guard rejected fails (the accepted writes are then
// committed: writing the same batch again reports them AlreadyRecorded).
func (s *Store) CompleteMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	return s.guarded(ctx, "complete", refs, nil, nil, s.q.complete)
}

// CompleteAndDeleteMany completes claims of a table that keeps no history:
// each accepted claim's row is deleted instead of marked DONE, in one
// statement under the same guard as [Store.CompleteMany]. An accepted result
// reports Status DONE. Deleting forgets the event id, so a later enqueue of
// the same id is no longer a duplicate.
func (s *Store) CompleteAndDeleteMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	return s.guarded(ctx, "complete", refs, nil, nil, s.q.completeDelete)
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

// RetryMany is [Store.Retry] for many claims in one statement. Every error
// text is cleaned (see [RetryRequest]), so no text can fail the batch.
func (s *Store) RetryMany(ctx context.Context, reqs []RetryRequest) ([]Result, error) {
	refs, delays, errs, err := splitRetries(reqs)
	if err != nil {
		return nil, err
	}
	values := func(i int) []any {
		snooze := 0
		if reqs[i].Snooze {
			snooze = 1
		}
		return []any{delays[i], errs[i], snooze}
	}
	return s.guarded(ctx, "retry", refs, errs, values, s.q.retry)
}

// Fail ends one claim as FAILED with reason. It returns an error matching
// leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) Fail(ctx context.Context, req FailRequest) error {
	return single(s.FailMany(ctx, []FailRequest{req}))
}

// FailMany is [Store.Fail] for many claims in one statement. Every reason is
// cleaned (see [FailRequest]), so no text can fail the batch.
func (s *Store) FailMany(ctx context.Context, reqs []FailRequest) ([]Result, error) {
	refs := make([]leasework.Ref, len(reqs))
	reasons := make([]string, len(reqs))
	for i, r := range reqs {
		refs[i], reasons[i] = r.Ref, CleanText(r.Reason, MaxErrorBytes)
	}
	values := func(i int) []any { return []any{reasons[i]} }
	return s.guarded(ctx, "fail", refs, reasons, values, s.q.fail)
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

// RenewMany renews many claims in one statement. A renewal is never
// AlreadyRecorded: a rejected one is lost (or Gone).
//
// Unlike the other batched writes, RenewMany never waits for a row lock: a
// row locked by another transaction is skipped and reported [Result].Busy
// (neither renewed nor lost), so a handler's open transaction that has
// completed its claim ([Store.CompleteTx]) holds up no renewal, of its own
// claim or of the others in the batch.
func (s *Store) RenewMany(ctx context.Context, refs []leasework.Ref, lease time.Duration) ([]Result, error) {
	if lease < time.Millisecond {
		return nil, fmt.Errorf("lease: renew: lease is %v; it must be at least 1ms", lease)
	}
	return s.guarded(ctx, "renew", refs, nil, nil, s.q.renew, lease.Microseconds())
}

// Release gives one claim back to READY at once and returns the attempt it
// consumed, for a graceful shutdown; listening workers are notified. It
// returns nil when the release is recorded, by this call or an earlier try
// (which gave the attempt back once), and an error matching
// leasework.ErrLeaseLost when the claim is no longer owned.
func (s *Store) Release(ctx context.Context, ref leasework.Ref) error {
	return single(s.ReleaseMany(ctx, []leasework.Ref{ref}))
}

// ReleaseMany is [Store.Release] for many claims in one statement.
func (s *Store) ReleaseMany(ctx context.Context, refs []leasework.Ref) ([]Result, error) {
	return s.guarded(ctx, "release", refs, nil, nil, s.q.release, s.channel)
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
		return s.wrapErr("progress", err)
	}
	return nil
}

// guarded runs one batched outcome statement and matches the rows it
// returned (id, generation, status or lease_until) to the refs asked for.
// Its parameters are the batch's ($1 and $2, see batchArgs, with the
// write's per-claim values) followed by extra. texts, when not nil, holds
// per ref the error text the write stores.
func (s *Store) guarded(ctx context.Context, op string, refs []leasework.Ref, texts []string,
	values func(i int) []any, query string, extra ...any) ([]Result, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, query, append(s.batchArgs(refs, values), extra...)...)
	if err != nil {
		return nil, s.wrapErr(op, err)
	}
	defer rows.Close()
	type accepted struct {
		status     leasework.Status
		leaseUntil time.Time
	}
	got := make(map[leasework.Ref]accepted, len(refs))
	busy := map[leasework.Ref]bool{}
	for rows.Next() {
		var ref leasework.Ref
		var a accepted
		var err error
		if op == "renew" {
			var skipped bool
			err = rows.Scan(&ref.ID, &ref.Generation, &a.leaseUntil, &skipped)
			a.status = leasework.StatusInProgress
			if err == nil && skipped {
				busy[ref] = true
				continue
			}
		} else {
			err = rows.Scan(&ref.ID, &ref.Generation, &a.status)
		}
		if err != nil {
			return nil, s.wrapErr(op, err)
		}
		got[ref] = a
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr(op, err)
	}
	out := make([]Result, len(refs))
	rejected := false
	for i, ref := range refs {
		out[i].Ref = ref
		if a, ok := got[ref]; ok {
			out[i].Status, out[i].LeaseUntil = a.status, a.leaseUntil
		} else if busy[ref] {
			out[i].Busy = true
			out[i].Err = fmt.Errorf("lease: %s row %d generation %d: %w", op, ref.ID, ref.Generation, errprefix.Trim("lease: ", ErrRowBusy))
		} else {
			out[i].Err = lost(op, ref)
			rejected = true
		}
	}
	if rejected {
		if err := s.settleRejected(ctx, op, out, texts); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rowState is what settleRejected reads of a row.
type rowState struct {
	status     leasework.Status
	generation int64
	lastError  string
	cancelled  bool // cancelled_at is set
}

// settleRejected reads the rows of the rejected results in out, by id, and
// marks each AlreadyRecorded, Gone or Cancelled as [Result] says. A
// rejected outcome write (not a renewal) of an attempt cancelled while it
// ran is that attempt's stop: its row ends DISCARDED (stopCancelled).
func (s *Store) settleRejected(ctx context.Context, op string, out []Result, texts []string) error {
	var ids []int64
	for _, r := range out {
		if r.Err != nil && !r.Busy {
			ids = append(ids, r.Ref.ID)
		}
	}
	rows, err := s.db.QueryContext(ctx, s.q.rejected, s.drv.Array(ids))
	if err != nil {
		return s.wrapErr(op+": read rejected rows", err)
	}
	defer rows.Close()
	states := make(map[int64]rowState, len(ids))
	for rows.Next() {
		var id int64
		var st rowState
		if err := rows.Scan(&id, &st.status, &st.generation, &st.lastError, &st.cancelled); err != nil {
			return s.wrapErr(op+": read rejected rows", err)
		}
		states[id] = st
	}
	if err := rows.Err(); err != nil {
		return s.wrapErr(op+": read rejected rows", err)
	}
	for i := range out {
		r := &out[i]
		if r.Err == nil || r.Busy {
			continue
		}
		st, ok := states[r.Ref.ID]
		if !ok {
			r.Gone = true
			r.Err = fmt.Errorf("lease: %s row %d generation %d: the row no longer exists: %w", op, r.Ref.ID, r.Ref.Generation, leasework.ErrLeaseLost)
			continue
		}
		var text string
		if texts != nil {
			text = texts[i]
		}
		switch {
		case recordedBy(op, r.Ref, st, text):
			r.Err, r.AlreadyRecorded, r.Status = nil, true, st.status
		case cancelledSince(r.Ref, st):
			r.Cancelled = true
			r.Err = fmt.Errorf("lease: %s row %d generation %d: %w", op, r.Ref.ID, r.Ref.Generation, leasework.ErrCancelled)
		default:
			r.DoneByClaim = st.status == leasework.StatusDone && st.generation == r.Ref.Generation
		}
	}
	if op == "renew" {
		return nil
	}
	return s.stopCancelled(ctx, op, out, states)
}

// recordedBy reports whether a row in state st shows that the claim ref
// already wrote op, storing text as the last error; see [Result].
func recordedBy(op string, ref leasework.Ref, st rowState, text string) bool {
	if st.generation != ref.Generation {
		return false
	}
	switch op {
	case "complete":
		return st.status == leasework.StatusDone
	case "retry":
		return (st.status == leasework.StatusReady || st.status == leasework.StatusFailed) && st.lastError == text
	case "fail":
		return st.status == leasework.StatusFailed && st.lastError == text
	case "release":
		return st.status == leasework.StatusReady
	}
	return false // renew
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

// batchArgs returns the first two parameters of a batched guarded write:
// the claims' ids ($1, an array bound by the driver) and their generations
// with the write's values keyed by id ($2, see byID).
func (s *Store) batchArgs(refs []leasework.Ref, values func(i int) []any) []any {
	ids := make([]int64, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return []any{s.drv.Array(ids), byID(refs, values)}
}

// byID encodes the $2 parameter of a batched guarded write (see batchGuard):
// a JSON object from each claim's id to [generation, values(i)...]. A batch
// naming an id more than once keeps the entry of the highest generation,
// the only one that can own the row (the first of equal ones); the others
// are rejected like any stale claim. values is nil when the write has none.
func byID(refs []leasework.Ref, values func(i int) []any) string {
	pick := make(map[int64]int, len(refs))
	for i, r := range refs {
		if j, ok := pick[r.ID]; !ok || r.Generation > refs[j].Generation {
			pick[r.ID] = i
		}
	}
	b := make([]byte, 0, 24*len(pick)+2)
	b = append(b, '{')
	for i, r := range refs {
		if pick[r.ID] != i {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, r.ID, 10)
		b = append(b, `":[`...)
		b = strconv.AppendInt(b, r.Generation, 10)
		if values != nil {
			for _, v := range values(i) {
				b = append(b, ',')
				b = appendJSON(b, v)
			}
		}
		b = append(b, ']')
	}
	return string(append(b, '}'))
}

// appendJSON appends v as JSON: the writes' values are int64s and cleaned
// texts (CleanText), which marshal without error.
func appendJSON(b []byte, v any) []byte {
	if n, ok := v.(int64); ok {
		return strconv.AppendInt(b, n, 10)
	}
	js, _ := json.Marshal(v)
	return append(b, js...)
}

func splitRetries(reqs []RetryRequest) (refs []leasework.Ref, delays []int64, errs []string, err error) {
	refs = make([]leasework.Ref, len(reqs))
	delays, errs = make([]int64, len(reqs)), make([]string, len(reqs))
	for i, r := range reqs {
		if r.Delay < 0 {
			return nil, nil, nil, fmt.Errorf("lease: retry: row %d generation %d: Delay is %v; it must not be negative", r.Ref.ID, r.Ref.Generation, r.Delay)
		}
		refs[i], delays[i], errs[i] = r.Ref, r.Delay.Microseconds(), CleanText(r.Error, MaxErrorBytes)
	}
	return refs, delays, errs, nil
}
