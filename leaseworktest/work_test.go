package leaseworktest_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/leaseworktest"
)

func TestWorkFillsTheClaim(t *testing.T) {
	ctx := context.Background()
	var got *leasework.Claim
	h := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		got = c
		return nil
	})
	before := time.Now()
	res, err := leaseworktest.Work(t, ctx, h, leasework.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the handler was not called")
	}
	if !equalClaims(*got, res.Claim) {
		t.Errorf("Result.Claim = %+v, the handler got %+v", res.Claim, *got)
	}
	c := res.Claim
	if c.ID != 1 || c.Attempt != 1 || c.Generation != 1 || c.MaxAttempts != lease.DefaultMaxAttempts ||
		c.Queue != lease.DefaultQueue || c.Priority != 0 || c.Reclaimed {
		t.Errorf("a zero claim was filled in as %+v", c)
	}
	if _, err := uuid.Parse(c.EventID); err != nil {
		t.Errorf("EventID %q is not a UUID: %v", c.EventID, err)
	}
	if lo, hi := before.Add(framework.DefaultLease), time.Now().Add(framework.DefaultLease); c.LeaseUntil.Before(lo) || c.LeaseUntil.After(hi) {
		t.Errorf("LeaseUntil %v is not DefaultLease from now", c.LeaseUntil)
	}
	second, err := leaseworktest.Work(t, ctx, h, leasework.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if second.Claim.EventID == c.EventID {
		t.Errorf("two claims got the same event id %q", c.EventID)
	}

	// What the test sets is handed over as it is; the generation follows a
	// later attempt.
	until := time.Now().Add(time.Minute)
	given := leasework.Claim{ID: 7, EventID: "order-42", Kind: "order.placed", Key: "order-42", Payload: []byte("{}"),
		Attempt: 3, Snoozes: 1, MaxAttempts: 5, LeaseUntil: until, Reclaimed: true, Progress: []byte("page 2"),
		LastError: "timeout", Queue: "orders", Priority: 4}
	res, err = leaseworktest.Work(t, ctx, h, given)
	if err != nil {
		t.Fatal(err)
	}
	want := given
	want.Generation = 3
	if !equalClaims(res.Claim, want) {
		t.Errorf("claim\n got %+v\nwant %+v", res.Claim, want)
	}
}

func equalClaims(a, b leasework.Claim) bool {
	return bytes.Equal(a.Payload, b.Payload) && bytes.Equal(a.Progress, b.Progress) &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.ID == b.ID && a.EventID == b.EventID && a.Kind == b.Kind &&
		a.Key == b.Key && a.Generation == b.Generation && a.Attempt == b.Attempt && a.Snoozes == b.Snoozes &&
		a.MaxAttempts == b.MaxAttempts && a.Reclaimed == b.Reclaimed && a.LastError == b.LastError &&
		a.Queue == b.Queue && a.Priority == b.Priority
}

func TestWorkRefusesAClaimNoWorkerHandsOut(t *testing.T) {
	ok := leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil })
	for _, tc := range []struct {
		name  string
		claim leasework.Claim
		want  string
	}{
		{"attempt beyond the budget", leasework.Claim{Attempt: 3, MaxAttempts: 2}, "Attempt 3 is beyond MaxAttempts 2"},
		{"generation below the attempt", leasework.Claim{Attempt: 3, Generation: 2}, "Generation 2 is below Attempt 3"},
		{"negative id", leasework.Claim{ID: -1}, "ID is -1"},
		{"negative attempt", leasework.Claim{Attempt: -1}, "Attempt is -1"},
		{"negative snoozes", leasework.Claim{Snoozes: -1}, "Snoozes is -1"},
		{"snoozes beyond the earlier attempts", leasework.Claim{Attempt: 2, Snoozes: 2}, "Snoozes 2 is not below Attempt 2"},
		{"priority out of range", leasework.Claim{Priority: lease.MaxPriority + 1}, "Priority is 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			msg := failure(t, func(tb testing.TB) {
				leaseworktest.Work(tb, context.Background(), leasework.HandlerFunc(func(context.Context, *leasework.Claim) error {
					called = true
					return nil
				}), tc.claim)
			})
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "a worker never hands out this claim") {
				t.Errorf("failure %q, want one saying %q", msg, tc.want)
			}
			if called {
				t.Error("the handler ran")
			}
		})
	}
	if msg := failure(t, func(tb testing.TB) { leaseworktest.Work(tb, context.Background(), nil, leasework.Claim{}) }); !strings.Contains(msg, "handler is nil") {
		t.Errorf("a nil handler failed with %q", msg)
	}
	if msg := failure(t, func(tb testing.TB) { leaseworktest.Work(tb, context.Background(), ok, leasework.Claim{}) }); msg != "" {
		t.Errorf("a valid claim failed: %s", msg)
	}
}

// The handler's context is a handler's as far as the framework's context
// functions go, derived from the test's, and ends when the handler returns.
func TestWorkHandlerContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "test's")
	var hctx context.Context
	var claim *leasework.Claim
	res, err := leaseworktest.Work(t, ctx, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		hctx = ctx
		got, ok := framework.ClaimFromContext(ctx)
		if !ok || got != c {
			t.Errorf("ClaimFromContext = %p, %v; the handler's claim is %p", got, ok, c)
		}
		claim = c
		if ctx.Value(key{}) != "test's" {
			t.Error("the handler's context is not derived from the test's")
		}
		if ctx.Err() != nil {
			t.Errorf("the handler's context ended while it ran: %v", context.Cause(ctx))
		}
		return nil
	}), leasework.Claim{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Kind != "k" || res.Claim.Kind != "k" {
		t.Errorf("kind %q, result's %q", claim.Kind, res.Claim.Kind)
	}
	select {
	case <-hctx.Done():
	default:
		t.Error("the handler's context did not end when it returned")
	}

	// A test's context that ends ends the handler's.
	cctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("the test stops")
	_, err = leaseworktest.Work(t, cctx, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		cancel(stop)
		<-ctx.Done()
		return context.Cause(ctx)
	}), leasework.Claim{})
	if !errors.Is(err, stop) {
		t.Errorf("the handler saw %v, want the test's cause", err)
	}

	// Outside a handler, the framework's functions still say so.
	if _, ok := framework.ClaimFromContext(context.Background()); ok {
		t.Error("ClaimFromContext found a claim in a plain context")
	}
	if err := framework.RecordProgress(context.Background(), []byte("x")); !errors.Is(err, framework.ErrNoClaim) {
		t.Errorf("RecordProgress in a plain context: %v", err)
	}
	if err := framework.CompleteInTx(context.Background(), nil); !errors.Is(err, framework.ErrNoClaim) {
		t.Errorf("CompleteInTx in a plain context: %v", err)
	}
}

func TestWorkRecordsProgress(t *testing.T) {
	res, err := leaseworktest.Work(t, context.Background(), leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		page := []byte("page 1")
		if err := framework.RecordProgress(ctx, page); err != nil {
			return err
		}
		page[5] = '9' // the handler's buffer is its own again
		if err := framework.RecordProgress(ctx, []byte("page 2")); err != nil {
			return err
		}
		big := make([]byte, framework.MaxProgressSize+1)
		if err := framework.RecordProgress(ctx, big); !errors.Is(err, framework.ErrProgressTooLarge) {
			t.Errorf("progress of %d bytes: %v, want ErrProgressTooLarge", len(big), err)
		}
		return nil
	}), leasework.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Progress) != 2 || string(res.Progress[0]) != "page 1" || string(res.Progress[1]) != "page 2" {
		t.Errorf("progress %q, want [page 1, page 2]", res.Progress)
	}
	if res.CompletedInTx {
		t.Error("CompletedInTx without a transaction")
	}

	res, err = leaseworktest.Work(t, context.Background(), leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil }), leasework.Claim{})
	if err != nil || res.Progress != nil {
		t.Errorf("a handler that records nothing: progress %q, error %v", res.Progress, err)
	}
}

// The handler's error comes back as it is, for the test to tell a failure
// from a permanent one, a snooze or a chosen delay; a panic comes back as
// the worker records it.
func TestWorkReturnsTheHandlersError(t *testing.T) {
	ctx := context.Background()
	bad := errors.New("bad address")
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"nil", nil, func(err error) bool { return err == nil }},
		{"failure", bad, func(err error) bool { return err == bad }},
		{"permanent", leasework.Permanent(bad), func(err error) bool { return leasework.IsPermanent(err) && errors.Is(err, bad) }},
		{"snooze", leasework.Snooze(time.Minute), func(err error) bool {
			var s *leasework.SnoozeError
			return errors.As(err, &s) && s.Delay == time.Minute
		}},
		{"retry after", leasework.RetryAfter(bad, time.Hour), func(err error) bool {
			var r *leasework.RetryAfterError
			return errors.As(err, &r) && r.Delay == time.Hour && errors.Is(err, bad)
		}},
	} {
		_, err := leaseworktest.Work(t, ctx, leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return tc.err }), leasework.Claim{})
		if !tc.check(err) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}

	res, err := leaseworktest.Work(t, ctx, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		_ = framework.RecordProgress(ctx, []byte("before the panic"))
		panic("out of range")
	}), leasework.Claim{})
	var p *leasework.PanicError
	if !errors.As(err, &p) || p.Value != "out of range" || !bytes.Contains(p.Stack, []byte("TestWorkReturnsTheHandlersError")) {
		t.Errorf("a panicking handler returned %v", err)
	}
	if res == nil || len(res.Progress) != 1 {
		t.Errorf("the result of a panicking handler: %+v", res)
	}
}

// A Transactional handler needs a worker's transaction: run by Work it
// fails permanently with ErrNoClaim, its function not called, and
// CompleteInTx says it is not a Transactional handler's context.
func TestWorkTransactionalHandler(t *testing.T) {
	ctx := context.Background()
	called := false
	_, err := leaseworktest.Work(t, ctx, framework.Transactional(func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		called = true
		return nil
	}), leasework.Claim{})
	if !errors.Is(err, framework.ErrNoClaim) || !leasework.IsPermanent(err) || called {
		t.Errorf("Transactional handler: %v (called: %v), want a permanent ErrNoClaim", err, called)
	}
	_, err = leaseworktest.Work(t, ctx, leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		return framework.CompleteInTx(ctx, nil)
	}), leasework.Claim{})
	if err == nil || !strings.Contains(err.Error(), "not a Transactional handler's") {
		t.Errorf("CompleteInTx in a plain handler: %v", err)
	}
}

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	secret  string // not encoded: the handler never sees it
}

var sendEmail = lease.Kind[email]{Name: "email.send", Queue: "mail", Priority: 2, MaxAttempts: 5}

func TestWorkKind(t *testing.T) {
	ctx := context.Background()
	var got email
	res, err := leaseworktest.WorkKind(t, ctx, sendEmail, func(ctx context.Context, c *leasework.Claim, m email) error {
		got = m
		if err := framework.RecordProgress(ctx, []byte("sent")); err != nil {
			return err
		}
		return nil
	}, email{To: "ada@example.com", Subject: "hello", secret: "x"}, leasework.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if got != (email{To: "ada@example.com", Subject: "hello"}) {
		t.Errorf("the handler got %+v, want what JSON carries", got)
	}
	c := res.Claim
	if c.Kind != "email.send" || c.Queue != "mail" || c.Priority != 2 || c.MaxAttempts != 5 || c.Attempt != 1 ||
		string(c.Payload) != `{"to":"ada@example.com","subject":"hello"}` {
		t.Errorf("claim %+v", c)
	}
	if len(res.Progress) != 1 {
		t.Errorf("progress %q", res.Progress)
	}

	// The claim's own fields win over the kind's defaults.
	res, err = leaseworktest.WorkKind(t, ctx, sendEmail, func(context.Context, *leasework.Claim, email) error { return nil },
		email{}, leasework.Claim{Kind: "email.send", Queue: "bulk", Priority: 7, Attempt: 9, MaxAttempts: 10})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Claim; c.Queue != "bulk" || c.Priority != 7 || c.Attempt != 9 || c.MaxAttempts != 10 || c.Generation != 9 {
		t.Errorf("claim %+v", c)
	}

	// A kind without defaults gets the store's.
	plain := lease.Kind[int]{Name: "count"}
	res, err = leaseworktest.WorkKind(t, ctx, plain, func(_ context.Context, _ *leasework.Claim, n int) error {
		if n != 42 {
			t.Errorf("args %d", n)
		}
		return nil
	}, 42, leasework.Claim{})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Claim; c.Queue != lease.DefaultQueue || c.MaxAttempts != lease.DefaultMaxAttempts || string(c.Payload) != "42" {
		t.Errorf("claim %+v", c)
	}
}

// brokenCodec encodes, and never decodes.
type brokenCodec struct{}

func (brokenCodec) Encode(s string) ([]byte, error) { return []byte(s), nil }
func (brokenCodec) Decode([]byte) (string, error)   { return "", errors.New("no decoder") }

// failingCodec cannot encode.
type failingCodec struct{}

func (failingCodec) Encode(string) ([]byte, error) { return nil, errors.New("no encoder") }
func (failingCodec) Decode([]byte) (string, error) { return "", nil }

func TestWorkKindFailures(t *testing.T) {
	ctx := context.Background()
	called := false
	fn := func(context.Context, *leasework.Claim, string) error { called = true; return nil }

	// A payload that does not decode fails permanently, as under
	// HandleKind, and the handler is not called.
	_, err := leaseworktest.WorkKind(t, ctx, lease.Kind[string]{Name: "k", Codec: brokenCodec{}}, fn, "x", leasework.Claim{})
	if !leasework.IsPermanent(err) || !strings.Contains(err.Error(), "no decoder") || called {
		t.Errorf("undecodable payload: %v (called: %v)", err, called)
	}

	for _, tc := range []struct {
		name string
		run  func(t testing.TB)
		want string
	}{
		{"args that do not encode", func(tb testing.TB) {
			leaseworktest.WorkKind(tb, ctx, lease.Kind[string]{Name: "k", Codec: failingCodec{}}, fn, "x", leasework.Claim{})
		}, "no encoder"},
		{"another kind", func(tb testing.TB) {
			leaseworktest.WorkKind(tb, ctx, lease.Kind[string]{Name: "k"}, fn, "x", leasework.Claim{Kind: "other"})
		}, `the claim's Kind is "other"`},
		{"a payload", func(tb testing.TB) {
			leaseworktest.WorkKind(tb, ctx, lease.Kind[string]{Name: "k"}, fn, "x", leasework.Claim{Payload: []byte("{}")})
		}, "the claim carries a Payload"},
		{"a nil handler", func(tb testing.TB) {
			leaseworktest.WorkKind[string](tb, ctx, lease.Kind[string]{Name: "k"}, nil, "x", leasework.Claim{})
		}, "handler is nil"},
	} {
		called = false
		if msg := failure(t, tc.run); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: failure %q, want one saying %q", tc.name, msg, tc.want)
		}
		if called {
			t.Errorf("%s: the handler ran", tc.name)
		}
	}
}

// WorkTx runs a Transactional handler's function in the test's
// transaction: its writes and its enqueues are there to assert on, and
// CompleteInTx is recorded.
func TestWorkTx(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		shipments := lease.QuoteIdent(s.Schema()) + ".shipments"
		if _, err := s.DB().ExecContext(ctx, `CREATE TABLE `+shipments+` (event_id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		ship := func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+shipments+` (event_id) VALUES ($1)`, c.EventID); err != nil {
				return err
			}
			if _, err := sendEmail.Enqueue(ctx, s, tx, email{To: "ada@example.com", Subject: c.EventID}); err != nil {
				return err
			}
			return framework.CompleteInTx(ctx, tx)
		}

		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		res, err := leaseworktest.WorkTx(t, ctx, tx, ship, leasework.Claim{EventID: "order-42"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.CompletedInTx {
			t.Error("CompleteInTx was not recorded")
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+shipments+` WHERE event_id = 'order-42'`).Scan(&n); err != nil || n != 1 {
			t.Errorf("shipments in tx: %d, %v", n, err)
		}
		rows := leaseworktest.RequireEnqueuedKindTx(t, ctx, s.WrapTx(tx), s, sendEmail, &leaseworktest.EnqueuedOptions{Queue: "mail", Count: 1})
		if rows[0].Args.Subject != "order-42" {
			t.Errorf("enqueued %+v", rows[0].Args)
		}
		// Nothing is committed: WorkTx leaves tx to the test.
		leaseworktest.RequireNotEnqueued(t, ctx, s, sendEmail.Name, nil)
		if err := tx.Rollback(); err != nil {
			t.Fatalf("WorkTx ended the transaction: %v", err)
		}

		// CompleteInTx checks tx as under a worker.
		tx2, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		other, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback()
		res, err = leaseworktest.WorkTx(t, ctx, tx2, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			return framework.CompleteInTx(ctx, other)
		}, leasework.Claim{})
		if err == nil || !strings.Contains(err.Error(), "tx is not the transaction") || res.CompletedInTx {
			t.Errorf("CompleteInTx with another transaction: %v, recorded %v", err, res.CompletedInTx)
		}

		// An error is returned as it is, and the transaction is the test's
		// to roll back.
		bad := errors.New("no stock")
		_, err = leaseworktest.WorkTx(t, ctx, tx2, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error { return bad }, leasework.Claim{})
		if err != bad {
			t.Errorf("WorkTx returned %v", err)
		}
		if err := tx2.Rollback(); err != nil {
			t.Errorf("WorkTx ended the transaction: %v", err)
		}

		if msg := failure(t, func(tb testing.TB) { leaseworktest.WorkTx(tb, ctx, nil, ship, leasework.Claim{}) }); !strings.Contains(msg, "tx is nil") {
			t.Errorf("a nil tx failed with %q", msg)
		}
	})
}
