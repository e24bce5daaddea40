package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var drv = pgxdriver.New()

func TestNewRejectsBadConfiguration(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://unused")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		name string
		db   *sql.DB
		drv  leasework.Driver
		opts lease.Options
		want string
	}{
		{"nil db", nil, drv, lease.Options{}, "db is nil"},
		{"nil driver", db, nil, lease.Options{}, "driver is nil"},
		{"quote in table", db, drv, lease.Options{Table: `ev"; DROP TABLE x; --`}, "Options.Table"},
		{"space in schema", db, drv, lease.Options{Schema: "my schema"}, "Options.Schema"},
		{"dot in table", db, drv, lease.Options{Table: "a.b"}, "Options.Table"},
		{"leading digit", db, drv, lease.Options{Table: "1events"}, "starting with a letter"},
		{"long table", db, drv, lease.Options{Table: strings.Repeat("t", 41)}, "at most 40"},
		{"reserved prefix", db, drv, lease.Options{Schema: "pg_catalog"}, "reserved"},
		{"upper case schema", db, drv, lease.Options{Schema: "Mixed_Case"},
			`Options.Schema "Mixed_Case" has upper case; use lower case: PostgreSQL folds unquoted names to lower case, so Mixed_Case would be created as "Mixed_Case" and not found as Mixed_Case`},
		{"upper case table", db, drv, lease.Options{Table: "Events"}, `Options.Table "Events" has upper case; use lower case`},
		{"negative attempts", db, drv, lease.Options{MaxAttempts: -1}, "Options.MaxAttempts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := lease.New(c.db, c.drv, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New(%+v) = %v, %v; want an error containing %q", c.opts, s, err, c.want)
			}
		})
	}
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	db := pgtest.Open(t, drv)
	// "order" is a reserved word: the table works only if every statement
	// quotes its name.
	s, err := lease.New(db, drv, lease.Options{Schema: pgtest.SchemaName(), Table: "order"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DropSchema(context.Background()) })
	ctx := context.Background()
	var wg sync.WaitGroup
	applied := make([][]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { applied[i], errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("concurrent migrate %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	if want := len(lease.Migrations()); total != want {
		t.Fatalf("concurrent migrations applied %d steps in all, want %d (each once)", total, want)
	}
	again, err := s.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing applied", again, err)
	}
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + s.QualifiedTable()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v; want 1 row in the table named by a reserved word", n, err)
	}
}

// TestEnqueueInCallerTransaction: through every enqueue path (the INSERT
// through each driver, lib/pq's COPY), events vanish with a rollback,
// get generated ids and the store's defaults, a duplicate id (in the
// table or twice in the call) is ErrDuplicateEvent and changes nothing,
// SkipDuplicates skips it, and bad input is refused before anything is
// sent.
func TestEnqueueInCallerTransaction(t *testing.T) {
	pgtest.EachEnqueuePath(t, testEnqueueInCallerTransaction)
}

func testEnqueueInCallerTransaction(t *testing.T, p pgtest.EnqueuePath) {
	s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
	inserts := pgtest.WatchInserts(t, s)
	ctx := context.Background()

	// Rolled back with the business write: nothing to claim.
	tx, _ := s.DB().BeginTx(ctx, nil)
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", EventID: "gone"}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if _, err := s.GetByEventID(ctx, "gone"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("rolled-back event: err = %v, want ErrNotFound", err)
	}

	out := pgtest.Enqueue(t, s, lease.Event{Kind: "k", EventID: "a", Key: "order-1", Payload: []byte("p")}, lease.Event{Kind: "k"})
	if out[0].EventID != "a" || out[0].ID == 0 || out[1].EventID == "" || out[1].Duplicate {
		t.Fatalf("enqueued = %+v", out)
	}
	row, err := s.GetByEventID(ctx, out[1].EventID)
	if err != nil || row.Status != leasework.StatusReady || row.MaxAttempts != lease.DefaultMaxAttempts {
		t.Fatalf("generated-id row = %+v, %v", row, err)
	}

	// A duplicate is an error, and the existing row is untouched.
	tx, _ = s.DB().BeginTx(ctx, nil)
	_, err = s.Enqueue(ctx, tx, lease.Event{Kind: "other", EventID: "a", Payload: []byte("new")})
	tx.Rollback()
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		t.Fatalf("duplicate enqueue err = %v, want ErrDuplicateEvent", err)
	}
	row, _ = s.GetByEventID(ctx, "a")
	if row.Kind != "k" || string(row.Payload) != "p" || row.Key != "order-1" {
		t.Fatalf("duplicate overwrote the row: %+v", row)
	}

	// Twice in one call is caught before the database.
	tx, _ = s.DB().BeginTx(ctx, nil)
	_, err = s.Enqueue(ctx, tx, lease.Event{Kind: "k", EventID: "x"}, lease.Event{Kind: "k", EventID: "x"})
	tx.Rollback()
	if !errors.Is(err, leasework.ErrDuplicateEvent) {
		t.Fatalf("in-call duplicate err = %v, want ErrDuplicateEvent", err)
	}

	// SkipDuplicates reports and skips.
	tx, _ = s.DB().BeginTx(ctx, nil)
	res, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{Kind: "k", EventID: "a"}, lease.Event{Kind: "k", EventID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].ID != 0 || res[1].Duplicate || res[1].ID == 0 {
		t.Fatalf("skip duplicates = %+v", res)
	}

	// Bad input.
	tx, _ = s.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, nil, lease.Event{Kind: "k"}); err == nil || !strings.Contains(err.Error(), "tx is nil") {
		t.Fatalf("nil tx err = %v", err)
	}
	if _, err := s.Enqueue(ctx, tx, lease.Event{}); err == nil || !strings.Contains(err.Error(), "Kind is empty") {
		t.Fatalf("empty kind err = %v", err)
	}
	if _, err := s.Enqueue(ctx, tx, lease.Event{Kind: "k", MaxAttempts: -2}); err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("negative attempts err = %v", err)
	}
	checkInsertsBy(t, inserts, p.Copies)
}

// checkInsertsBy checks that the rows counted by inserts (of
// pgtest.WatchInserts) went in with COPY only, or with INSERT only.
func checkInsertsBy(t *testing.T, inserts func() (copies, statements int), copied bool) {
	t.Helper()
	copies, statements := inserts()
	if copied && (copies == 0 || statements != 0) || !copied && (copies != 0 || statements == 0) {
		t.Errorf("the enqueues' rows went in by %d COPY and %d INSERT statements; want them all by %s",
			copies, statements, map[bool]string{true: "COPY", false: "INSERT"}[copied])
	}
}

func TestClaimRejectsBadRequests(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	for _, req := range []lease.ClaimRequest{
		{Limit: 0, Lease: time.Second},
		{Limit: -1, Lease: time.Second},
		{Limit: 1, Lease: 0},
		{Limit: 1, Lease: -time.Second},
	} {
		if _, err := s.Claim(ctx, req); err == nil {
			t.Errorf("Claim(%+v) succeeded; want an error", req)
		}
	}
	if _, err := s.ExplainClaim(ctx, lease.ClaimRequest{Limit: 0, Lease: time.Second}); err == nil || !strings.Contains(err.Error(), "Limit") {
		t.Errorf("ExplainClaim with a zero limit: %v; want an error naming Limit", err)
	}
	if _, err := s.WriteMany(ctx, lease.Renew(leasework.Ref{ID: 1, Generation: 1}, 0)); err == nil {
		t.Error("WriteMany of a renewal with a zero lease succeeded")
	}
	if _, err := s.WriteMany(ctx, lease.Retry(leasework.Ref{}, -time.Second, "")); err == nil {
		t.Error("WriteMany of a retry with a negative delay succeeded")
	}
	if _, err := s.Requeue(ctx, lease.RequeueRequest{}); err == nil {
		t.Error("Requeue with no selector succeeded")
	}
}

func TestClaimFiltersKindsAndScheduling(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s,
		lease.Event{Kind: "a", EventID: "a1"},
		lease.Event{Kind: "b", EventID: "b1"},
		lease.Event{Kind: "a", EventID: "later", RunAt: time.Now().Add(time.Hour)},
	)
	got, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute, Kinds: []string{"a"}, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].EventID != "a1" || got[0].Generation != 1 || got[0].Attempt != 1 {
		t.Fatalf("claim kinds=[a] = %+v; want a1 only (b is another kind, later is not due)", got)
	}
	row, _ := s.Get(ctx, got[0].ID)
	if row.Worker != "w" || row.Status != leasework.StatusInProgress {
		t.Fatalf("claimed row = %+v", row)
	}
	// The worker that finished a row stays on it, for operators.
	if _, err := s.Write(ctx, lease.Complete(got[0].Ref())); err != nil {
		t.Fatal(err)
	}
	if row, _ := s.Get(ctx, got[0].ID); row.Worker != "w" || row.Status != leasework.StatusDone {
		t.Fatalf("completed row: worker %q status %s; want w and DONE", row.Worker, row.Status)
	}
}

func TestStatsAndRetention(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"}, lease.Event{Kind: "k"}, lease.Event{Kind: "k"})
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	if _, err := s.Write(ctx, lease.Complete(claims[0].Ref())); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[leasework.StatusReady] != 1 || st.Rows[leasework.StatusInProgress] != 1 || st.Rows[leasework.StatusDone] != 1 || st.Rows[leasework.StatusFailed] != 0 || st.Eligible != 1 || st.ExpiredClaims != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if n, err := s.DeleteFinished(ctx, time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("delete finished older than an hour = %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteFinished(ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("delete finished = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, claims[0].ID); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("deleted row: %v", err)
	}
}

// TestClaimLimitIsBounded: a limit above lease.MaxClaimLimit is an error
// that names the bound, never an allocation sized by the caller (1e9 rows
// ran out of memory, math.MaxInt panicked); the bound itself is claimable.
func TestClaimLimitIsBounded(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	pgtest.Enqueue(t, s, lease.Event{Kind: "k"})
	for _, limit := range []int{lease.MaxClaimLimit + 1, 1e9, math.MaxInt} {
		got, err := s.Claim(ctx, lease.ClaimRequest{Limit: limit, Lease: time.Minute})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Limit is %d; it must be between 1 and %d", limit, lease.MaxClaimLimit)) {
			t.Errorf("Claim with Limit %d = %d claims, %v; want an error naming the bound", limit, len(got), err)
		}
		if _, err := s.ExplainClaim(ctx, lease.ClaimRequest{Limit: limit, Lease: time.Minute}); err == nil {
			t.Errorf("ExplainClaim with Limit %d succeeded", limit)
		}
	}
	got, err := s.Claim(ctx, lease.ClaimRequest{Limit: lease.MaxClaimLimit, Lease: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim with Limit MaxClaimLimit = %d claims, %v; want the one row", len(got), err)
	}
}
