package lease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasework/leasework"
)

// MaxClaimLimit is the most rows one claim statement may take. A larger
// [ClaimRequest.Limit] is an error, not a request to be cut down: a limit
// that large is a mistake (a count of bytes, an unbounded default). Nothing
// is allocated from the limit; the claims returned grow with the rows
// actually claimed.
const MaxClaimLimit = 10000

// ClaimRequest says what to claim.
type ClaimRequest struct {
	// Limit is the most rows to claim; between 1 and [MaxClaimLimit].
	Limit int
	// Lease is how long each claim is owned before another worker may take
	// it; positive, at least a millisecond.
	Lease time.Duration
	// Kinds restricts the claim to these kinds. Empty means every kind.
	Kinds []string
	// Worker names the claiming worker in the row, for operators. Optional.
	Worker string
	// Queue is the queue to claim from. Empty means [DefaultQueue]. A
	// paused queue gives nothing (see [Store.PauseQueue]).
	Queue string
	// DueFrom, when given, starts the reading of READY rows of priority p
	// at due time DueFrom[p] instead of at the oldest: rows of that level
	// due earlier are not claimed by this call (a zero time reads the
	// level from the oldest, as do levels past the slice's end). At most
	// [MaxPriority]+1 entries. It keeps a claim's walk short while vacuum
	// cannot remove the index entries of rows already claimed (a long
	// transaction or a REPEATABLE READ reader pins the xmin horizon):
	// those entries sort ahead of every row still READY, and each costs a
	// heap visit. A caller that gives it must also claim without it now
	// and then, or a row due before its floor (committed late, given a
	// run time already past) waits for ever; the framework's worker does
	// both (see framework.Config).
	DueFrom []time.Time
	// ExpiredFrom, when not zero, starts the reading of expired leases at
	// lease_until ExpiredFrom instead of at the oldest: leases that ran
	// out earlier are not claimed by this call. It does for the lease
	// index what DueFrom does for the READY rows: every row claimed leaves
	// an entry there, whose lease has run out once the row has been
	// finished a lease ago, and which vacuum cannot remove while the
	// horizon is pinned. The expired leases on their last attempt, which
	// the claim ends FAILED, are read from ExpiredFrom too, and the rows
	// cancelled while an attempt ran them, whose lease has run out (ended
	// DISCARDED by a claim, whatever their queue), are left to a claim
	// without it: they have no queue to bound that read by. The same duty
	// comes with it: a caller that gives it must also claim without it
	// now and then.
	ExpiredFrom time.Time
}

// Claim claims up to req.Limit eligible rows of one queue in one
// statement: INPROGRESS rows whose lease has expired, then due READY rows,
// priority 0 first, in due order within a priority. Each claimed row gets a
// new generation, an attempt, and a lease of req.Lease from the database
// clock. The claim is committed when Claim returns. A paused queue gives
// nothing.
//
// Expired rows on their last allowed attempt are moved to FAILED by the same
// statement instead of being returned.
//
// A claimed row that cannot be decoded (a value the schema refuses today,
// written before it did: metadata that is not an object of strings, a due
// time of infinity) is not returned and fails nothing else: it is ended
// FAILED, with a reason naming the column ("claim: cannot decode column
// ..."), by a guarded write at the generation the claim gave it. Should
// that write fail, the row stays under its lease, and a claim after the
// lease expires settles it.
//
// It returns an error, and claims nothing, for a request out of range (see
// [ClaimRequest]), and when the statement fails; when the table or its
// schema does not exist, the error names the table and says to migrate it.
func (s *Store) Claim(ctx context.Context, req ClaimRequest) ([]leasework.Claim, error) {
	claims, _, err := s.ClaimHeldBack(ctx, req)
	return claims, err
}

// ClaimHeldBack is [Store.Claim] that also reports whether a concurrency
// limit (see [Store.SetLimit]) or a rate limit ([Store.SetRateLimit]) kept
// the claim from rows it would otherwise have taken: its queue's limit
// admitted fewer rows than req.Limit, a kind of the claim was at its
// limit, a rate limit of the claim had no room, or more rows of a kind
// were found than its limits admitted. Such rows are skipped, not waited
// for: a READY row due before a row claimed, or an expired lease older
// than one taken back, may have been left by a limit. A caller that
// starts its later claims past the rows it claimed (req.DueFrom,
// req.ExpiredFrom: the framework's claim floors) must not move them
// after such a claim. heldBack is false when nothing was claimed: the
// statement returns it with its rows.
func (s *Store) ClaimHeldBack(ctx context.Context, req ClaimRequest) (claims []leasework.Claim, heldBack bool, err error) {
	claims, bad, heldBack, err := s.scanClaims(ctx, s.db, req)
	if err == nil && len(bad) > 0 {
		// The claims are committed and the caller's whatever becomes of
		// this write (see above).
		_ = s.settleUndecodable(ctx, s.db, bad)
	}
	return claims, heldBack, err
}

// ClaimTx runs the claim statement inside tx instead of committing it: the
// rows stay locked, and other claimers skip them, until tx ends; if tx rolls
// back, the claim never happened. Workers use [Store.Claim]; ClaimTx exists to
// test that boundary and for callers that must claim atomically with their
// own writes. Never run a handler while tx is open. A row it cannot decode
// is ended FAILED in tx, as [Store.Claim] does; if that write fails, so
// does ClaimTx (tx is then unusable: roll it back).
func (s *Store) ClaimTx(ctx context.Context, tx *sql.Tx, req ClaimRequest) ([]leasework.Claim, error) {
	if tx == nil {
		return nil, errors.New("lease: claim: tx is nil")
	}
	claims, bad, _, err := s.scanClaims(ctx, tx, req)
	if err == nil && len(bad) > 0 {
		err = s.settleUndecodable(ctx, tx, bad)
	}
	if err != nil {
		return nil, err
	}
	return claims, nil
}

// querier is what the store needs to run a query: *sql.DB, *sql.Conn and
// *sql.Tx all have it.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// claimFor returns the claim statement for queue: the one that keeps fair
// scheduling and priority aging (migration 22) when the last claim of
// the queue that took rows said the queue has either, else the plain one,
// which reads neither. A queue made fair, or given an aging, has its
// first claim of each store that takes rows in the queue's plain order;
// the claims after it keep the new policy. A queue that stops being
// either goes back to the plain statement after its next claim that
// takes rows.
func (s *Store) claimFor(queue string) string {
	if v, ok := s.policies.Load(queue); ok && v.(bool) {
		return s.q.claimFair
	}
	return s.q.claim
}

// learnPolicy reads whether queue is fair or ages its rows, once per
// queue and store, before its first claim (see claimFor). Its error is the
// claim's: in the caller's transaction (ClaimTx) a failed read leaves the
// transaction aborted, and the claim statement after it could only say
// so, not why.
func (s *Store) learnPolicy(ctx context.Context, q querier, queue string) error {
	if _, ok := s.policies.Load(queue); ok {
		return nil
	}
	rows, err := q.QueryContext(ctx, s.fq.policy, queue)
	if err != nil {
		return err
	}
	defer rows.Close()
	var yes bool
	if rows.Next() {
		if err := rows.Scan(&yes); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.policies.Store(queue, yes)
	return nil
}

// scanClaims runs the claim statement for req and reads the claims it
// returns, and, apart, the claimed rows it cannot decode, each with the
// reason to fail it with: the column and why (invariant 14); and whether a
// limit held rows back (see [Store.ClaimHeldBack]).
func (s *Store) scanClaims(ctx context.Context, q querier, req ClaimRequest) (claims []leasework.Claim, bad []Write, heldBack bool, err error) {
	args, err := s.claimArgs(req)
	if err != nil {
		return nil, nil, false, err
	}
	queue := args[4].(string)
	if err := s.learnPolicy(ctx, q, queue); err != nil {
		return nil, nil, false, s.wrapErr("claim", err)
	}
	query := s.claimFor(queue)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, false, s.wrapErr("claim", err)
	}
	defer rows.Close()
	// claims is not sized from req.Limit: the table may hold far fewer rows.
	var policy bool
	took := false
	for rows.Next() {
		took = true
		var c leasework.Claim
		var meta, steps string
		var d decoder
		if err := rows.Scan(&c.ID, col(&d, "event_id", &c.EventID), col(&d, "kind", &c.Kind), col(&d, "key", &c.Key),
			col(&d, "payload", &c.Payload), &c.Generation, col(&d, "attempt", &c.Attempt),
			col(&d, "max_attempts", &c.MaxAttempts), col(&d, "lease_until", &c.LeaseUntil),
			col(&d, "reclaimed", &c.Reclaimed), col(&d, "progress", &c.Progress), col(&d, "last_error", &c.LastError),
			col(&d, "queue", &c.Queue), col(&d, "priority", &c.Priority), col(&d, "next_attempt_at", &c.DueAt),
			col(&d, "metadata", &meta), col(&d, "snoozes", &c.Snoozes), &heldBack, &policy, col(&d, "steps", &steps)); err != nil {
			return nil, nil, false, s.wrapErr("claim", err)
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
		return nil, nil, false, s.wrapErr("claim", err)
	}
	if took && policy != (query == s.q.claimFair) {
		s.policies.Store(queue, policy)
	}
	return claims, bad, heldBack, nil
}

// settleUndecodable ends the claimed rows of the failures bad FAILED with
// their reasons, under the guard of every outcome write (invariant 2),
// running the fail statement with q: in the claim's own transaction when
// it has one.
func (s *Store) settleUndecodable(ctx context.Context, q querier, bad []Write) error {
	all := make([]int, len(bad))
	for i := range bad {
		all[i] = i
	}
	if _, _, err := s.run(ctx, q, true, bad, all); err != nil {
		return s.wrapErr("claim: fail the rows it cannot decode", err)
	}
	return nil
}

// ExplainClaim returns the plan of the claim statement for req, as EXPLAIN
// (ANALYZE, BUFFERS) reports it. The statement really runs, inside a
// transaction that is rolled back, so nothing is claimed. Use it to check
// that claims stay index-driven on a large table.
func (s *Store) ExplainClaim(ctx context.Context, req ClaimRequest) (string, error) {
	args, err := s.claimArgs(req)
	if err != nil {
		return "", err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", s.wrapErr("explain claim", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+s.claimFor(args[4].(string)), args...)
	if err != nil {
		return "", s.wrapErr("explain claim", err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", s.wrapErr("explain claim", err)
		}
		plan.WriteString(line)
		plan.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return "", s.wrapErr("explain claim", err)
	}
	return plan.String(), nil
}

// claimArgs checks req and returns the claim statement's parameters.
func (s *Store) claimArgs(req ClaimRequest) ([]any, error) {
	if req.Limit < 1 || req.Limit > MaxClaimLimit {
		return nil, fmt.Errorf("lease: claim: Limit is %d; it must be between 1 and %d", req.Limit, MaxClaimLimit)
	}
	if req.Lease < time.Millisecond {
		return nil, fmt.Errorf("lease: claim: Lease is %v; it must be at least 1ms", req.Lease)
	}
	queue, err := checkQueue("claim", req.Queue)
	if err != nil {
		return nil, err
	}
	kinds := req.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	if len(req.DueFrom) > MaxPriority+1 {
		return nil, fmt.Errorf("lease: claim: DueFrom has %d entries; there are %d priority levels", len(req.DueFrom), MaxPriority+1)
	}
	// Microseconds from the Unix epoch, 0 for none: a bigint array binds
	// alike through every driver.
	from := make([]int64, len(req.DueFrom))
	for i, t := range req.DueFrom {
		if !t.IsZero() {
			from[i] = t.UnixMicro()
		}
	}
	var expiredFrom int64
	if !req.ExpiredFrom.IsZero() {
		expiredFrom = req.ExpiredFrom.UnixMicro()
	}
	return []any{req.Limit, s.drv.Array(kinds), req.Lease.Microseconds(), req.Worker, queue, s.drv.Array(from), expiredFrom}, nil
}

// checkQueue returns the queue named, [DefaultQueue] for "", or an error
// for op when the name is not valid.
func checkQueue(op, queue string) (string, error) {
	if queue == "" {
		return DefaultQueue, nil
	}
	if err := validateText("Queue", queue, MaxQueueBytes); err != nil {
		return "", fmt.Errorf("lease: %s: %w", op, err)
	}
	return queue, nil
}

// NextWake reports how long from now, by the database clock, a row of
// queue (empty: [DefaultQueue]) next becomes claimable by itself: the
// earliest lease still running runs out (the row is claimable again if its
// owner does not renew it), or the earliest READY row not yet due comes
// due (a retry's or a snooze's delay ends, an event enqueued to run later
// is due), or a rate limit over the queue's rows has room again for what
// it holds back (the cost of a due row at the head of a priority level,
// or one start while it is full), whichever is first. ok is false when
// none lies ahead. It reads one entry of the lease index and one of the
// ready index per priority level, and while a rate limit is declared, the
// head of each level's due rows and each such limit's shares. Workers use
// it to wake for those rows without waiting for their next poll: neither
// an expired lease, a row coming due, nor a window moving on sends a
// notification.
func (s *Store) NextWake(ctx context.Context, queue string) (d time.Duration, ok bool, err error) {
	d, ok, _, err = s.NextWakeFrom(ctx, queue, time.Time{})
	return d, ok, err
}

// NextWakeFrom is [Store.NextWake] with a floor for its read of the running
// leases: a lease that runs out before leasesFrom is not seen (zero, or a
// time already past: from now). It also returns the end of the earliest
// running lease it saw, from its floor (zero for none), for the caller to
// give as its next floor while that is ahead. A lease runs out a lease
// after its claim, so every row claimed and finished in the last lease
// period leaves an entry ahead of now in the lease index, which vacuum
// cannot remove while a long transaction pins the xmin horizon; read from
// the floor, a call walks only those of the rows claimed since the lease
// it found was granted. A lease granted since then that runs out before
// it (a claim with a shorter lease) is not waited for: the caller's next
// poll or claim takes it.
func (s *Store) NextWakeFrom(ctx context.Context, queue string, leasesFrom time.Time) (d time.Duration, ok bool, earliest time.Time, err error) {
	queue, err = checkQueue("next wake", queue)
	if err != nil {
		return 0, false, time.Time{}, err
	}
	var from int64
	if !leasesFrom.IsZero() {
		from = leasesFrom.UnixMicro()
	}
	var secs sql.NullFloat64
	var lease int64
	if err := s.db.QueryRowContext(ctx, s.q.nextWake, queue, from).Scan(&secs, &lease); err != nil {
		return 0, false, time.Time{}, s.wrapErr("next wake", err)
	}
	if lease != 0 {
		earliest = time.UnixMicro(lease)
	}
	if !secs.Valid {
		return 0, false, earliest, nil
	}
	return max(time.Duration(secs.Float64*float64(time.Second)), 0), true, earliest, nil
}
