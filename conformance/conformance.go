package conformance

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// Target is what the suite runs against.
type Target struct {
	// Driver is the driver under test. Required.
	Driver leasework.Driver

	// DSN names a database where the suite may create and drop schemas.
	// Required.
	DSN string

	// OpenDB opens the pools the suite works through: one to check that
	// the database is reachable, and one per subtest, each for the dsn it
	// is given and closed by the suite when done with it: DSN, or for the
	// dead-connection properties DSN pointed at the suite's proxy or
	// silent server (see the package documentation). Nil means
	// Driver.Open(dsn).
	// Set it to test the driver with a connector or pool options of your
	// own: a pool of the same driver library, whose errors Driver
	// classifies. It is called from parallel subtests at once. A subtest
	// that re-executes the test binary (the kill tests) opens its pool in
	// the child with the OpenDB of the Target the same test function builds
	// there: a func cannot cross the process boundary, so build it in the
	// test function, not from state the parent process set up before
	// calling Run. On a pool where the driver's Listen reports
	// errors.ErrUnsupported, the notification properties are skipped.
	OpenDB func(dsn string) (*sql.DB, error)

	// NewStore builds the store under test over a migrated table. Nil
	// means lease.New, the real store: leave it nil to test a driver. The
	// suite's self-test sets it to the unsafe baseline.
	NewStore func(db *sql.DB, drv leasework.Driver, opts lease.Options) (Store, error)
}

// Store is the part of the lease store the suite exercises. *lease.Store
// implements it.
type Store interface {
	Enqueue(ctx context.Context, tx *sql.Tx, events ...lease.Event) ([]lease.Enqueued, error)
	EnqueueWith(ctx context.Context, tx *sql.Tx, opts lease.EnqueueOptions, events ...lease.Event) ([]lease.Enqueued, error)
	Claim(ctx context.Context, req lease.ClaimRequest) ([]leasework.Claim, error)
	ClaimTx(ctx context.Context, tx *sql.Tx, req lease.ClaimRequest) ([]leasework.Claim, error)
	Write(ctx context.Context, w lease.Write) (lease.Result, error)
	WriteMany(ctx context.Context, writes ...lease.Write) ([]lease.Result, error)
	WriteTx(ctx context.Context, tx *sql.Tx, w lease.Write) error
	Requeue(ctx context.Context, req lease.RequeueRequest) ([]int64, error)
	Discard(ctx context.Context, ref leasework.Ref) (int64, error)
	PauseQueue(ctx context.Context, queue string) (bool, error)
	ResumeQueue(ctx context.Context, queue string) (bool, error)
	Cancel(ctx context.Context, id int64, reason string) (lease.CancelResult, error)
	WriteManyTakingTurns(ctx context.Context, req lease.ClaimRequest, writes ...lease.Write) ([]lease.Result, []leasework.Claim, error)
	SetLimit(ctx context.Context, l lease.Limit, by string) (int, error)
	SetRateLimit(ctx context.Context, l lease.RateLimit, by string) (old lease.RateLimit, had bool, err error)
	SetWeight(ctx context.Context, w lease.Weight, by string) (old int, err error)
}

// Environment variables between the suite and its child processes.
const (
	envRole   = "LEASEWORK_CONFORMANCE_ROLE"
	envDSN    = "LEASEWORK_CONFORMANCE_DSN"
	envSchema = "LEASEWORK_CONFORMANCE_SCHEMA"
)

// watchdog bounds every subtest.
const watchdog = 2 * time.Minute

// A property is one subtest: a name that says what must hold, and the test.
type property struct {
	name string
	run  func(e *env)
}

// Run runs every property against target, each as a parallel subtest in a
// schema of its own.
func Run(t *testing.T, target Target) {
	t.Helper()
	if target.Driver == nil {
		t.Fatal("conformance: Target.Driver is nil")
	}
	if target.DSN == "" {
		t.Fatal("conformance: Target.DSN is empty; name a database where the suite may create schemas")
	}
	if os.Getenv(envRole) == "" {
		// Fail once, clearly, when the database is unreachable.
		db, err := target.open(target.DSN)
		if err != nil {
			t.Fatalf("conformance: %v", err)
		}
		err = db.PingContext(context.Background())
		db.Close()
		if err != nil {
			t.Fatalf("conformance: cannot reach the target database: %v", err)
		}
	}
	for _, p := range properties() {
		t.Run(p.name, func(t *testing.T) {
			if os.Getenv(envRole) == "" {
				t.Parallel()
			}
			p.run(newEnv(t, target))
		})
	}
}

func properties() []property {
	return slices.Concat(labProperties(), productProperties(), batchProperties(), enqueueProperties(), txProperties(),
		orderProperties(), queueProperties(), limitProperties(), partitionProperties(), rateProperties(), fairProperties(), cancelProperties(), snoozeProperties(), copyProperties(),
		deadConnProperties())
}

// suiteIdleConns is how many idle connections a pool the suite opens with
// Driver.Open keeps. A pool from Target.OpenDB keeps what it was given.
const suiteIdleConns = 16

// open opens a pool for dsn with OpenDB, or Driver.Open when it is nil.
func (target Target) open(dsn string) (*sql.DB, error) {
	if target.OpenDB == nil {
		db, err := target.Driver.Open(dsn)
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		// Its concurrent properties use a dozen connections at once;
		// database/sql keeps two idle, and would set the others up again
		// for nearly every statement.
		db.SetMaxIdleConns(suiteIdleConns)
		return db, nil
	}
	db, err := target.OpenDB(dsn)
	if err != nil {
		return nil, fmt.Errorf("Target.OpenDB: %w", err)
	}
	if db == nil {
		return nil, errors.New("Target.OpenDB returned a nil pool and no error")
	}
	return db, nil
}

// env is one subtest's world: its own schema, the store under test, and the
// real store over the same table for fixtures and reads.
type env struct {
	t      *testing.T
	ctx    context.Context
	target Target
	db     *sql.DB
	schema string
	store  Store        // under test
	fix    *lease.Store // reads and fixtures
	floor  int64        // the server's generation floor; see gen
}

func newEnv(t *testing.T, target Target) *env {
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	t.Cleanup(cancel)
	dsn, schema := target.DSN, os.Getenv(envSchema)
	child := os.Getenv(envRole) != ""
	if child {
		dsn = os.Getenv(envDSN)
	} else {
		schema = newSchemaName()
	}
	db, err := target.open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	opts := lease.Options{Schema: schema}
	fix, err := lease.New(db, target.Driver, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !child {
		if _, err := fix.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		t.Cleanup(func() {
			if err := fix.DropSchema(context.Background()); err != nil {
				t.Errorf("drop schema %s: %v", schema, err)
			}
		})
	}
	var store Store = fix
	if target.NewStore != nil {
		store, err = target.NewStore(db, target.Driver, opts)
		if err != nil {
			t.Fatalf("Target.NewStore: %v", err)
		}
	}
	var floor int64
	if err := db.QueryRowContext(ctx, timelineFloorSQL).Scan(&floor); err != nil {
		t.Fatalf("read the generation floor of the server's timeline: %v", err)
	}
	return &env{t: t, ctx: ctx, target: target, db: db, schema: schema, store: store, fix: fix, floor: floor}
}

// timelineFloorSQL reads the floor under every generation the server gives,
// (timeline - 1) * 2^32, as the claim computes it: the timeline is the
// first eight hex digits of the name of the WAL file being written. It is
// 0 on a server never promoted or restored (timeline 1).
const timelineFloorSQL = `SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32`

// gen is the generation a row has after n claims and repairs (requeue,
// discard, cancel) on this server: 0 before any, then one more than before
// but never less than the floor of the server's timeline. The first claim
// of a row takes 1 on timeline 1, and the floor itself on a promoted or
// restored server (timeline 2 starts at 2^32); each later one adds 1. Every
// expected generation of the suite is written with it, so that the suite
// holds on any timeline and still fails when a generation is off by one.
func (e *env) gen(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return max(n, e.floor+n-1)
}

func newSchemaName() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "conformance_" + hex.EncodeToString(b)
}

// The standard lease of the suite: long enough never to run out during a
// subtest, so that only the fixture expires it.
const testLease = 5 * time.Minute

func (e *env) enqueue(events ...lease.Event) []lease.Enqueued {
	e.t.Helper()
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback()
	out, err := e.store.Enqueue(e.ctx, tx, events...)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit enqueue: %v", err)
	}
	return out
}

// enqueueN enqueues n events of kind "k" named event-001, event-002, ...
func (e *env) enqueueN(n int) []lease.Enqueued {
	e.t.Helper()
	events := make([]lease.Event, n)
	for i := range events {
		events[i] = lease.Event{Kind: "k", EventID: eventName(i + 1)}
	}
	return e.enqueue(events...)
}

func eventName(i int) string {
	const digits = "0123456789"
	return "event-" + string([]byte{digits[i/100%10], digits[i/10%10], digits[i%10]})
}

func (e *env) claim(limit int) []leasework.Claim {
	e.t.Helper()
	got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: limit, Lease: testLease, Worker: e.t.Name()})
	if err != nil {
		e.t.Fatalf("claim: %v", err)
	}
	return got
}

func (e *env) claimOne() leasework.Claim {
	e.t.Helper()
	got := e.claim(1)
	if len(got) != 1 {
		e.t.Fatalf("claim returned %d rows, want 1", len(got))
	}
	return got[0]
}

func (e *env) row(id int64) lease.Row {
	e.t.Helper()
	r, err := e.fix.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("read row: %v", err)
	}
	return r
}

// expire is the lease fixture: it moves the row's lease_until into the past,
// as if its owner had stalled or died.
func (e *env) expire(id int64) {
	e.t.Helper()
	if err := leasetest.ExpireLease(e.ctx, e.fix, id); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) wantState(id int64, status leasework.Status, generation int64) lease.Row {
	e.t.Helper()
	r := e.row(id)
	if r.Status != status || r.Generation != generation {
		e.t.Fatalf("row %d is %s generation %d; want %s generation %d", id, r.Status, r.Generation, status, generation)
	}
	if (r.Status == leasework.StatusInProgress) != (r.LeaseUntil != nil) {
		e.t.Fatalf("row %d is %s with lease_until %v", id, r.Status, r.LeaseUntil)
	}
	return r
}

// write makes one guarded write through the store under test and returns
// its error: nil when the write is made (accepted, or recorded by an
// earlier try).
func (e *env) write(w lease.Write) error {
	_, err := e.store.Write(e.ctx, w)
	return err
}

// answered is the error of a WriteMany call that got no answer: the call's
// own error, or that of the first write whose statement failed
// (lease.VerdictNoAnswer). A batch the suite checks must have got an
// answer for every write before its results are looked at.
func answered(res []lease.Result, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Verdict == lease.VerdictNoAnswer {
			if r.Err == nil {
				return fmt.Errorf("%s of row %d generation %d: verdict %s with no error", r.Op, r.Ref.ID, r.Ref.Generation, r.Verdict)
			}
			return r.Err
		}
	}
	return nil
}

// Writes of one op for many claims, to give WriteMany.

func completes(refs []leasework.Ref) []lease.Write { return each(refs, lease.Complete) }

func completesAndDeletes(refs []leasework.Ref) []lease.Write {
	return each(refs, lease.CompleteAndDelete)
}

func releases(refs []leasework.Ref) []lease.Write { return each(refs, lease.Release) }

func renewals(refs []leasework.Ref, l time.Duration) []lease.Write {
	return each(refs, func(ref leasework.Ref) lease.Write { return lease.Renew(ref, l) })
}

func each(refs []leasework.Ref, write func(leasework.Ref) lease.Write) []lease.Write {
	out := make([]lease.Write, len(refs))
	for i, ref := range refs {
		out[i] = write(ref)
	}
	return out
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, leasework.ErrLeaseLost) {
		t.Fatalf("%s: err = %v; want ErrLeaseLost", what, err)
	}
}

func wantOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// listen listens on the store's channel through the driver, or skips the
// subtest when the driver cannot: it does not implement leasework.Notifier,
// or its Listen says it can never listen on this pool (errors.ErrUnsupported,
// as for a pool from Target.OpenDB the driver did not open). Workers poll
// then, so neither is a violation.
func (e *env) listen() leasework.Listener {
	e.t.Helper()
	return e.listenOn(e.db, e.fix.Channel())
}

// listenOn is listen on channel through db.
func (e *env) listenOn(db *sql.DB, channel string) leasework.Listener {
	e.t.Helper()
	n, ok := e.target.Driver.(leasework.Notifier)
	if !ok {
		e.t.Skip("optional capability: the driver does not implement leasework.Notifier (workers poll)")
	}
	l, err := n.Listen(e.ctx, db, channel)
	if errors.Is(err, errors.ErrUnsupported) {
		e.t.Skipf("optional capability: the driver cannot listen on this pool (workers poll): %v", err)
	}
	wantOK(e.t, "listen", err)
	return l
}
