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

// ErrRowBusy is matched by the error of a renewal that skipped its row
// because another transaction holds its lock ([VerdictBusy]). It does not
// match leasework.ErrLeaseLost: the claim is not known to be lost.
var ErrRowBusy = errors.New("lease: row locked by another transaction")

// Write makes one guarded write and returns its result. The error is the
// result's Err (nil when the write is made: accepted, or recorded by an
// earlier try), or the error of a write no statement can make, whose
// result then has no verdict (zero); see [Verdict] for what the database
// answers.
func (s *Store) Write(ctx context.Context, w Write) (Result, error) {
	res, err := s.WriteMany(ctx, w)
	if err != nil {
		return Result{Op: w.op, Ref: w.ref}, err
	}
	return res[0], res[0].Err
}

// WriteMany makes guarded writes, of any ops, and returns one result per
// write in the order given. Writes of one op go out in one statement (a
// retry and a snooze share one; progress writes are one statement each),
// the statements in the order of the ops.
//
// Every batched statement locks its rows in id order before it writes
// them, so concurrent batches over the same rows, in any order, wait for
// each other instead of deadlocking. A batch may name a row more than
// once; each write gets a result, and of one statement's writes naming a
// row, only the one of the highest generation can pass the guard (give
// one claim one write per op: two writes of one op for the same claim are
// one statement's, and only the first one's values are stored, though
// both are answered accepted). A
// renewal never waits for a row lock: a row locked by another transaction
// is skipped and reported [VerdictBusy], so a handler's open transaction
// that has completed its claim ([Store.WriteTx]) holds up no renewal.
//
// A statement that fails gives its writes [VerdictNoAnswer] with the
// statement's error, and the other statements still run: one failure
// never holds back the writes of another op. Every text is cleaned (see
// [Retry]), so no text can fail a statement. WriteMany returns an error,
// and no results, only for a write no statement can make (no op, a
// negative delay, a lease under 1ms); nothing is written then.
func (s *Store) WriteMany(ctx context.Context, writes ...Write) ([]Result, error) {
	for _, w := range writes {
		if err := w.check(); err != nil {
			return nil, err
		}
	}
	out := make([]Result, len(writes))
	for i, w := range writes {
		out[i] = Result{Op: w.op, Ref: w.ref}
	}
	var rejected []int
	for _, group := range groups(writes) {
		rejected = append(rejected, s.writeGroup(ctx, writes, group, out)...)
	}
	if len(rejected) > 0 {
		s.settleRejected(ctx, writes, out, rejected)
	}
	return out, nil
}

// groups splits writes by statement: the indexes of the writes of each,
// in the order of the ops. Renewals are grouped by lease too (the lease is
// the statement's), and every progress write is a statement of its own.
func groups(writes []Write) [][]int {
	var byOp [numOps][]int
	for i, w := range writes {
		op := w.op
		if op == OpSnooze {
			op = OpRetry // one statement
		}
		byOp[op] = append(byOp[op], i)
	}
	var out [][]int
	for op, idx := range byOp {
		switch {
		case len(idx) == 0:
		case singleRow(Op(op)):
			for _, i := range idx {
				out = append(out, []int{i})
			}
		case Op(op) == OpStep:
			// A statement records one step a row: a claim's second step
			// of the call goes in the next statement, and so on.
			var rounds [][]int
			seen := map[int64]int{}
			for _, i := range idx {
				k := seen[writes[i].ref.ID]
				seen[writes[i].ref.ID] = k + 1
				if k == len(rounds) {
					rounds = append(rounds, nil)
				}
				rounds[k] = append(rounds[k], i)
			}
			out = append(out, rounds...)
		case Op(op) == OpRenew:
			byLease := map[time.Duration]int{}
			for _, i := range idx {
				l := writes[i].lease
				j, ok := byLease[l]
				if !ok {
					j = len(out)
					byLease[l] = j
					out = append(out, nil)
				}
				out[j] = append(out[j], i)
			}
		default:
			out = append(out, idx)
		}
	}
	return out
}

// writeGroup runs the statement of the writes group names (all of one
// statement), sets the results of those the guard accepted, and returns
// the rejected ones. A failed statement gives its writes VerdictNoAnswer.
func (s *Store) writeGroup(ctx context.Context, writes []Write, group []int, out []Result) (rejected []int) {
	accepted, busy, err := s.run(ctx, s.db, false, writes, group)
	return s.judgeGroup(writes, group, out, accepted, busy, err)
}

// judgeGroup sets the results of the writes of group from what their
// statement answered, and returns the rejected ones.
func (s *Store) judgeGroup(writes []Write, group []int, out []Result, accepted map[leasework.Ref]answer,
	busy map[leasework.Ref]bool, err error) (rejected []int) {
	op := writes[group[0]].op
	for _, i := range group {
		r, ref := &out[i], writes[i].ref
		switch a, ok := accepted[ref]; {
		case err != nil:
			r.Verdict, r.Err = VerdictNoAnswer, s.wrapErr(writes[i].op.String(), err)
		case ok:
			r.Verdict, r.Status, r.LeaseUntil = VerdictAccepted, a.status, a.leaseUntil
		case busy[ref]:
			r.Verdict = VerdictBusy
			r.Err = fmt.Errorf("lease: %s row %d generation %d: %w", op, ref.ID, ref.Generation, errprefix.Trim("lease: ", ErrRowBusy))
		default:
			rejected = append(rejected, i)
		}
	}
	return rejected
}

// answer is what an accepted write left.
type answer struct {
	status     leasework.Status
	leaseUntil time.Time
}

// run runs one statement for the writes group names, with q, and reads
// the rows it returned: (id, generation, status), or for a renewal (id,
// generation, lease_until, skipped). callerTx says q is a transaction the
// statement does not commit alone (see ops' queryTx).
func (s *Store) run(ctx context.Context, q querier, callerTx bool, writes []Write, group []int) (accepted map[leasework.Ref]answer, busy map[leasework.Ref]bool, err error) {
	query, args := s.statement(writes, group, callerTx)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	accepted = make(map[leasework.Ref]answer, len(group))
	renew := writes[group[0]].op == OpRenew
	for rows.Next() {
		var ref leasework.Ref
		var a answer
		var err error
		switch {
		case renew:
			var skipped bool
			err = rows.Scan(&ref.ID, &ref.Generation, &a.leaseUntil, &skipped)
			a.status = leasework.StatusInProgress
			if err == nil && skipped {
				if busy == nil {
					busy = map[leasework.Ref]bool{}
				}
				busy[ref] = true
				continue
			}
		case singleRow(writes[group[0]].op):
			ref = writes[group[0]].ref
			a.status = leasework.StatusInProgress
			err = rows.Scan(&ref.ID)
		default:
			err = rows.Scan(&ref.ID, &ref.Generation, &a.status)
		}
		if err != nil {
			return nil, nil, err
		}
		accepted[ref] = a
	}
	return accepted, busy, rows.Err()
}

// statement returns the query and parameters of one group's statement.
// A batched statement's parameters are $1 and $2 (see batchArgs, with the
// writes' own values) followed by the statement's own. callerTx is run's.
func (s *Store) statement(writes []Write, group []int, callerTx bool) (string, []any) {
	first := writes[group[0]]
	switch first.op { // one row
	case OpProgress:
		return s.q.progress, []any{first.ref.ID, first.ref.Generation, first.progress}
	case OpOutput:
		return s.q.output, []any{first.ref.ID, first.ref.Generation, first.progress}
	}
	refs := make([]leasework.Ref, len(group))
	for j, i := range group {
		refs[j] = writes[i].ref
	}
	var values func(j int) []any
	if v := ops[first.op].values; v != nil {
		values = func(j int) []any { return v(writes[group[j]]) }
	}
	args := s.batchArgs(refs, values)
	switch first.op {
	case OpRelease:
		args = append(args, s.channel)
	case OpRenew:
		args = append(args, first.lease.Microseconds())
	}
	if callerTx && ops[first.op].queryTx != nil {
		return ops[first.op].queryTx(&s.q), args
	}
	return ops[first.op].query(&s.q), args
}

// settleRejected reads the rows of the rejected writes (indexes into
// writes and out) again, by id, in one statement, and decides each one's
// verdict (judge). A rejected write that ends an attempt cancelled while
// it ran is that attempt's stop: its row ends DISCARDED (stopCancelled).
// When the rows cannot be read, the rejections stay VerdictNoAnswer with
// the reason: the writes were rejected, but the row alone tells whether
// an earlier try made them.
func (s *Store) settleRejected(ctx context.Context, writes []Write, out []Result, rejected []int) {
	states, err := s.readRejected(ctx, writes, rejected)
	if err != nil {
		for _, i := range rejected {
			out[i].Verdict, out[i].Err = VerdictNoAnswer, s.wrapErr(writes[i].op.String()+": read rejected rows", err)
		}
		return
	}
	for _, i := range rejected {
		st, ok := states[writes[i].ref.ID]
		if ok {
			judge(&out[i], writes[i], &st)
		} else {
			judge(&out[i], writes[i], nil)
		}
	}
	for _, i := range rejected {
		st, ok := states[writes[i].ref.ID]
		if !ok || out[i].Verdict != VerdictCancelled || !ops[writes[i].op].ends || st.status != leasework.StatusInProgress {
			continue
		}
		if err := s.stopCancelled(ctx, writes[i].ref); err != nil {
			out[i].Verdict, out[i].Err = VerdictNoAnswer, s.wrapErr(fmt.Sprintf("%s: end the cancelled attempt of row %d", writes[i].op, writes[i].ref.ID), err)
		}
	}
}

// readRejected reads the rows of the rejected writes by id; its error is
// the database's, for the caller to name per write.
func (s *Store) readRejected(ctx context.Context, writes []Write, rejected []int) (map[int64]rowState, error) {
	ids := make([]int64, len(rejected))
	for j, i := range rejected {
		ids[j] = writes[i].ref.ID
	}
	rows, err := s.db.QueryContext(ctx, s.q.rejected, s.drv.Array(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	states := make(map[int64]rowState, len(ids))
	for rows.Next() {
		var id int64
		var st rowState
		if err := rows.Scan(&id, &st.status, &st.generation, &st.lastError, &st.cancelled); err != nil {
			return nil, err
		}
		states[id] = st
	}
	return states, rows.Err()
}

// WriteTx makes a completion (OpComplete or OpCompleteAndDelete), a step
// record ([Step]) or an output ([Output]) inside the caller's transaction
// tx, under the same guard and lock order as [Store.WriteMany], so that
// the caller's business writes in tx and the write commit together or not
// at all: a step recorded in the transaction that made its effects is
// never recorded without them, nor they without it. A stale owner (a newer
// generation holds the row, its lease expired, the row is finished or
// gone) is rejected, and its business writes go with the rejection.
//
// It returns nil when the guard accepted the completion: the row is then
// locked by tx until tx ends. Commit tx soon: until then the claim's lease
// is not renewed (a renewal skips a locked row: [VerdictBusy]), nobody
// else can claim the row either (claims skip locked rows), and the
// completion takes effect at COMMIT. If tx rolls back instead, the claim is
// as it was: INPROGRESS, owned, under its old lease.
//
// Any other op, or a nil tx, is refused with an error before anything is
// sent, and tx is left as it was.
//
// It returns an error matching leasework.ErrLeaseLost when the guard
// rejected the completion (and leasework.ErrCancelled too when the event
// was cancelled while the claim ran it), and any other error when the
// statement failed. In both cases WriteTx has already rolled tx back, so a
// later tx.Commit returns sql.ErrTxDone and cannot commit the business
// writes by mistake; the caller only reports the error. A rejection is
// final: do not retry the completion in another transaction, the claim is
// no longer yours (or its completion was already committed by an earlier
// transaction of yours, whose effects must not be applied twice). A
// rejection as cancelled does not end the attempt, since the caller may
// still be running it: once it has stopped, any write that ends the
// attempt (a [Release], say) ends the event, as [Store.Cancel] says.
func (s *Store) WriteTx(ctx context.Context, tx *sql.Tx, w Write) error {
	switch {
	case tx == nil:
		return errors.New("lease: write in transaction: tx is nil")
	case w.op != OpComplete && w.op != OpCompleteAndDelete && w.op != OpStep && w.op != OpOutput:
		// Refused before anything is sent: tx is left as it was.
		return fmt.Errorf("lease: write in transaction: the op is %s; only a completion (lease.Complete, lease.CompleteAndDelete), a step (lease.Step) or an output (lease.Output) is written in the caller's transaction", w.op)
	}
	if err := w.check(); err != nil {
		return err
	}
	accepted, _, err := s.run(ctx, tx, true, []Write{w}, []int{0})
	if err == nil && len(accepted) == 1 {
		return nil
	}
	// A failed statement aborts the transaction in PostgreSQL anyway; a
	// rejected one must not commit the caller's writes.
	_ = tx.Rollback()
	if err == nil {
		why := leasework.ErrLeaseLost
		if s.rowCancelledSince(ctx, w.ref) {
			why = leasework.ErrCancelled
		}
		return fmt.Errorf("lease: %s in transaction row %d generation %d: the transaction was rolled back: %w",
			w.op, w.ref.ID, w.ref.Generation, why)
	}
	return s.wrapErr(fmt.Sprintf("%s in transaction row %d generation %d: the transaction was rolled back", w.op, w.ref.ID, w.ref.Generation), err)
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
