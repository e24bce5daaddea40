package lease_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// writesFor makes one write per ref with op: writesFor(refs, lease.Complete).
func writesFor(refs []leasework.Ref, op func(leasework.Ref) lease.Write) []lease.Write {
	ws := make([]lease.Write, len(refs))
	for i, r := range refs {
		ws[i] = op(r)
	}
	return ws
}

// claimByEvent enqueues one event per id, claims them all with a lease of
// a minute and returns the claims' refs by event id.
func claimByEvent(t *testing.T, s *lease.Store, ids ...string) map[string]leasework.Ref {
	t.Helper()
	events := make([]lease.Event, len(ids))
	for i, id := range ids {
		events[i] = lease.Event{Kind: "k", EventID: id}
	}
	pgtest.Enqueue(t, s, events...)
	claims, err := s.Claim(context.Background(), lease.ClaimRequest{Limit: len(ids) + 1, Lease: time.Minute})
	if err != nil || len(claims) != len(ids) {
		t.Fatalf("claim = %+v, %v; want %d claims", claims, err, len(ids))
	}
	byEvent := make(map[string]leasework.Ref, len(claims))
	for _, c := range claims {
		byEvent[c.EventID] = c.Ref()
	}
	return byEvent
}

func getRow(t *testing.T, s *lease.Store, id int64) lease.Row {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// One WriteMany of every op but a deletion, over seven claimed rows, given
// out of the order the ops are written in: one result per write, in the
// order given, each accepted with the status it left, and the rows show
// each write.
func TestWriteManyMixedBatch(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		c := claimByEvent(t, s, "complete", "retry", "snooze", "fail", "release", "renew", "progress")
		before := getRow(t, s, c["renew"].ID)
		if before.LeaseUntil == nil {
			t.Fatalf("claimed row %+v has no lease", before)
		}
		writes := []lease.Write{
			lease.Progress(c["progress"], []byte("half way")),
			lease.Release(c["release"]),
			lease.Renew(c["renew"], 2*time.Hour),
			lease.Fail(c["fail"], "bad input"),
			lease.Snooze(c["snooze"], time.Hour, "kept"),
			lease.Complete(c["complete"]),
			lease.Retry(c["retry"], time.Hour, "boom"),
		}
		wantStatus := []leasework.Status{
			leasework.StatusInProgress, leasework.StatusReady, leasework.StatusInProgress, leasework.StatusFailed,
			leasework.StatusReady, leasework.StatusDone, leasework.StatusReady,
		}
		res, err := s.WriteMany(ctx, writes...)
		if err != nil || len(res) != len(writes) {
			t.Fatalf("WriteMany = %+v, %v; want %d results", res, err, len(writes))
		}
		for i, r := range res {
			w := writes[i]
			if r.Op != w.Op() || r.Ref != w.Ref() || r.Verdict != lease.VerdictAccepted || r.Err != nil || r.Status != wantStatus[i] {
				t.Errorf("result %d (%s): %+v; want %s of %+v accepted, status %s", i, w.Op(), r, w.Op(), w.Ref(), wantStatus[i])
			}
			if (w.Op() == lease.OpRenew) == r.LeaseUntil.IsZero() {
				t.Errorf("result %d (%s): LeaseUntil %v; want it set for the renewal alone", i, w.Op(), r.LeaseUntil)
			}
		}

		if r := getRow(t, s, c["complete"].ID); r.Status != leasework.StatusDone || r.FinishedAt == nil || r.LeaseUntil != nil {
			t.Errorf("completed row: %+v; want DONE, finished, no lease", r)
		}
		hour := time.Now().Add(59 * time.Minute)
		if r := getRow(t, s, c["retry"].ID); r.Status != leasework.StatusReady || r.LastError != "boom" || r.Snoozes != 0 ||
			r.MaxAttempts != lease.DefaultMaxAttempts || r.LeaseUntil != nil || r.NextAttemptAt.Before(hour) {
			t.Errorf("retried row: %+v; want READY in an hour, last error boom, no snooze", r)
		}
		if r := getRow(t, s, c["snooze"].ID); r.Status != leasework.StatusReady || r.LastError != "kept" || r.Snoozes != 1 ||
			r.MaxAttempts != lease.DefaultMaxAttempts+1 || r.LeaseUntil != nil || r.NextAttemptAt.Before(hour) {
			t.Errorf("snoozed row: %+v; want READY in an hour, last error kept, one snooze, budget %d", r, lease.DefaultMaxAttempts+1)
		}
		if r := getRow(t, s, c["fail"].ID); r.Status != leasework.StatusFailed || r.LastError != "bad input" || r.FinishedAt == nil {
			t.Errorf("failed row: %+v; want FAILED with last error \"bad input\"", r)
		}
		if r := getRow(t, s, c["release"].ID); r.Status != leasework.StatusReady || r.Attempt != 0 || r.Worker != "" ||
			r.LeaseUntil != nil || r.NextAttemptAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("released row: %+v; want READY now, the attempt given back", r)
		}
		r := getRow(t, s, c["renew"].ID)
		if r.Status != leasework.StatusInProgress || r.LeaseUntil == nil || !r.LeaseUntil.Equal(res[2].LeaseUntil) ||
			r.LeaseUntil.Before(before.LeaseUntil.Add(time.Hour)) {
			t.Errorf("renewed row: %+v; want INPROGRESS, its lease moved from %v to the result's %v, about two hours on", r, before.LeaseUntil, res[2].LeaseUntil)
		}
		if r := getRow(t, s, c["progress"].ID); r.Status != leasework.StatusInProgress || !bytes.Equal(r.Progress, []byte("half way")) ||
			r.Generation != c["progress"].Generation {
			t.Errorf("row with progress: %+v; want INPROGRESS at its generation, progress \"half way\"", r)
		}
	})
}

// A write no statement can make (the zero Write, a retry or a snooze with
// a negative delay) fails the whole call before anything is written: the
// valid write beside it is not made.
func TestWriteManyRefusesABadWriteAndWritesNothing(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	c := claimByEvent(t, s, "a", "b")
	a, b := c["a"], c["b"]
	for _, bad := range []struct {
		name string
		w    lease.Write
		want string
	}{
		{"zero write", lease.Write{}, "has no op"},
		{"retry with a negative delay", lease.Retry(b, -time.Second, "x"), "lease: retry: row " + strconv.FormatInt(b.ID, 10) + " generation 1: Delay is -1s; it must not be negative"},
		{"snooze with a negative delay", lease.Snooze(b, -time.Millisecond, "x"), "lease: snooze: row " + strconv.FormatInt(b.ID, 10) + " generation 1: Delay is -1ms"},
	} {
		res, err := s.WriteMany(ctx, lease.Complete(a), bad.w)
		if err == nil || !strings.Contains(err.Error(), bad.want) || res != nil {
			t.Errorf("WriteMany with a %s = %+v, %v; want no results and an error containing %q", bad.name, res, err, bad.want)
		}
		if r, err := s.Write(ctx, bad.w); err == nil || !strings.Contains(err.Error(), bad.want) || r.Verdict != 0 {
			t.Errorf("Write of a %s = %+v, %v; want no verdict and an error containing %q", bad.name, r, err, bad.want)
		}
		for _, ref := range []leasework.Ref{a, b} {
			if r := getRow(t, s, ref.ID); r.Status != leasework.StatusInProgress || r.Generation != ref.Generation || r.LastError != "" {
				t.Fatalf("row %d after WriteMany with a %s: %+v; want untouched, INPROGRESS", ref.ID, bad.name, r)
			}
		}
	}
}

// WriteTx writes completions, steps and outputs only: any other op is refused with an error
// naming it, and so is a nil transaction; nothing is written, and the
// caller's transaction is left as it was.
func TestWriteTxRefusesOtherOpsAndANilTx(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	ref := claimByEvent(t, s, "a")["a"]
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, w := range []lease.Write{
		lease.Retry(ref, 0, "x"), lease.Snooze(ref, 0, "x"), lease.Fail(ref, "x"), lease.Release(ref),
		lease.Renew(ref, time.Minute), lease.Progress(ref, []byte("p")), {},
	} {
		err := s.WriteTx(ctx, tx, w)
		if want := "the op is " + w.Op().String() + ";"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("WriteTx of a %s: %v; want an error containing %q", w.Op(), err, want)
		}
	}
	if err := s.WriteTx(ctx, nil, lease.Complete(ref)); err == nil || !strings.Contains(err.Error(), "tx is nil") {
		t.Errorf("WriteTx with a nil tx: %v; want an error saying tx is nil", err)
	}
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Errorf("the caller's transaction after the refusals: %v; want it usable", err)
	}
	if r := getRow(t, s, ref.ID); r.Status != leasework.StatusInProgress || r.Generation != ref.Generation || r.LastError != "" || r.Progress != nil {
		t.Errorf("row after the refused writes: %+v; want untouched, INPROGRESS", r)
	}
	// The transaction is still the caller's: a completion in it is made.
	if err := s.WriteTx(ctx, tx, lease.Complete(ref)); err != nil {
		t.Fatalf("WriteTx of a completion after the refusals: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, s, ref.ID); st != leasework.StatusDone {
		t.Errorf("row after the committed completion: %s; want DONE", st)
	}
}

func TestOpAndVerdictNames(t *testing.T) {
	ops := map[lease.Op]string{
		lease.OpComplete: "complete", lease.OpCompleteAndDelete: "complete and delete", lease.OpRetry: "retry",
		lease.OpSnooze: "snooze", lease.OpFail: "fail", lease.OpRelease: "release", lease.OpRenew: "renew",
		lease.OpProgress: "progress", lease.OpStep: "step", lease.OpOutput: "output",
		0: "Op(0)", lease.OpOutput + 1: "Op(11)", 255: "Op(255)",
	}
	for op, want := range ops {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q; want %q", uint8(op), got, want)
		}
	}
	verdicts := map[lease.Verdict]string{
		lease.VerdictAccepted: "accepted", lease.VerdictRecorded: "recorded", lease.VerdictLost: "lost",
		lease.VerdictDone: "done", lease.VerdictCancelled: "cancelled", lease.VerdictGone: "gone",
		lease.VerdictBusy: "busy", lease.VerdictNoAnswer: "no answer",
		0: "Verdict(0)", lease.VerdictNoAnswer + 1: "Verdict(9)", 255: "Verdict(255)",
	}
	for v, want := range verdicts {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q; want %q", uint8(v), got, want)
		}
	}
	// The constructors give the op they name.
	ref := leasework.Ref{ID: 1, Generation: 1}
	for w, want := range map[*lease.Write]lease.Op{
		ptr(lease.Complete(ref)): lease.OpComplete, ptr(lease.CompleteAndDelete(ref)): lease.OpCompleteAndDelete,
		ptr(lease.Retry(ref, 0, "")): lease.OpRetry, ptr(lease.Snooze(ref, 0, "")): lease.OpSnooze,
		ptr(lease.Fail(ref, "")): lease.OpFail, ptr(lease.Release(ref)): lease.OpRelease,
		ptr(lease.Renew(ref, time.Second)): lease.OpRenew, ptr(lease.Progress(ref, nil)): lease.OpProgress,
		ptr(lease.Step(ref, "s", nil)): lease.OpStep, ptr(lease.Output(ref, nil)): lease.OpOutput,
	} {
		if w.Op() != want || w.Ref() != ref {
			t.Errorf("write %+v: op %s ref %+v; want %s of %+v", *w, w.Op(), w.Ref(), want, ref)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Each statement's writes get their own verdicts: completions of two stale
// claims (a newer generation, an expired lease) are rejected as lost, and
// the failures and the renewal of the owned claims in the same call are
// accepted.
func TestWriteManyVerdictsPerStatement(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		c := claimByEvent(t, s, "newer", "expired", "fail1", "fail2", "renew")
		if _, err := leasetest.NewerGeneration(ctx, s, c["newer"].ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := leasetest.ExpireLease(ctx, s, c["expired"].ID); err != nil {
			t.Fatal(err)
		}
		writes := []lease.Write{
			lease.Fail(c["fail1"], "one"),
			lease.Complete(c["newer"]),
			lease.Renew(c["renew"], time.Hour),
			lease.Complete(c["expired"]),
			lease.Fail(c["fail2"], "two"),
		}
		res, err := s.WriteMany(ctx, writes...)
		if err != nil || len(res) != len(writes) {
			t.Fatalf("WriteMany = %+v, %v; want %d results", res, err, len(writes))
		}
		for _, i := range []int{1, 3} {
			if r := res[i]; r.Ref != writes[i].Ref() || r.Verdict != lease.VerdictLost || !errors.Is(r.Err, leasework.ErrLeaseLost) ||
				errors.Is(r.Err, leasework.ErrCancelled) || !strings.Contains(r.Err.Error(), "lease: complete row ") {
				t.Errorf("stale completion %d: %+v; want lost (ErrLeaseLost), named a completion", i, r)
			}
		}
		for i, want := range map[int]leasework.Status{0: leasework.StatusFailed, 2: leasework.StatusInProgress, 4: leasework.StatusFailed} {
			if r := res[i]; r.Ref != writes[i].Ref() || r.Verdict != lease.VerdictAccepted || r.Err != nil || r.Status != want {
				t.Errorf("owned claim's write %d (%s): %+v; want accepted, %s", i, writes[i].Op(), r, want)
			}
		}
		if r := getRow(t, s, c["newer"].ID); r.Status != leasework.StatusInProgress || r.Generation != c["newer"].Generation+1 {
			t.Errorf("row of the newer generation: %+v; want INPROGRESS at generation %d", r, c["newer"].Generation+1)
		}
		if r := getRow(t, s, c["expired"].ID); r.Status != leasework.StatusInProgress || r.Generation != c["expired"].Generation ||
			r.LeaseUntil == nil || r.LeaseUntil.After(time.Now()) {
			t.Errorf("row of the expired lease: %+v; want INPROGRESS, its lease still expired", r)
		}
		wantStatuses(t, s, []int64{c["fail1"].ID, c["fail2"].ID, c["renew"].ID},
			leasework.StatusFailed, leasework.StatusFailed, leasework.StatusInProgress)
	})
}

// A statement that fails gives its writes VerdictNoAnswer with its error
// and holds back no other statement of the call: a completion batch over
// two keys gives way (55P03) while one key's lock is held, and the
// failure of a keyless claim beside it is made.
func TestWriteManyFailedStatementHoldsBackNoOther(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", Key: "b"}, lease.Event{Kind: "k", Key: "a"}, lease.Event{Kind: "k", EventID: "keyless"})
	byKey := map[string]leasework.Ref{}
	for _, c := range claimIDs(t, s, 10) {
		byKey[c.Key] = c.Ref()
	}
	if len(byKey) != 3 {
		t.Fatalf("claimed %+v; want the two heads and the keyless event", byKey)
	}
	holdKeyLock(t, s, "b")
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.WriteMany(bounded, lease.Complete(byKey["a"]), lease.Fail(byKey[""], "broken"), lease.Complete(byKey["b"]))
	if err != nil || len(res) != 3 {
		t.Fatalf("WriteMany = %+v, %v; want three results, no call error", res, err)
	}
	for _, i := range []int{0, 2} {
		if r := res[i]; r.Verdict != lease.VerdictNoAnswer || drv.SQLState(r.Err) != "55P03" || !strings.Contains(r.Err.Error(), "lease: complete: ") {
			t.Errorf("completion %d of the batch that gave way: %+v; want no answer, 55P03, named a completion", i, r)
		}
	}
	if r := res[1]; r.Verdict != lease.VerdictAccepted || r.Err != nil || r.Status != leasework.StatusFailed {
		t.Errorf("the keyless failure beside it: %+v; want accepted, FAILED", r)
	}
	wantStatuses(t, s, []int64{byKey["a"].ID, byKey["b"].ID, byKey[""].ID},
		leasework.StatusInProgress, leasework.StatusInProgress, leasework.StatusFailed)
}
