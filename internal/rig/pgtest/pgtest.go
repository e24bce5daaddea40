// Package pgtest gives tests a real PostgreSQL: the server named by
// $LEASEWORK_DSN, or a throwaway cluster started once per test binary.
//
// A package's tests use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and then call [DSN] or [Store]. When no server is named and no server
// binaries are installed, every test binary that uses it fails with a message
// that says what to install; it never skips.
package pgtest

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/lease"
)

var dsn string

// Main starts the server if needed, runs the tests, stops the server and
// exits. When benchmarks are asked for (-test.bench), a throwaway server runs
// with fsync on. A throwaway server's DSN is exported in $LEASEWORK_DSN, so child
// processes of the tests (the kill tests) use the same server.
//
// Each of after runs once the tests passed and the server stopped; one that
// returns an error fails the binary with it (a package's leak check over
// the tests that ran in parallel, for one).
func Main(m *testing.M, after ...func() error) {
	code := run(m)
	for _, f := range after {
		if code != 0 {
			break
		}
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	flag.Parse()
	dsn = strings.TrimSpace(os.Getenv(pgserver.EnvDSN))
	if dsn == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// Benchmarks get a durable server: fsync off would flatter them.
		bench := flag.Lookup("test.bench")
		durable := bench != nil && bench.Value.String() != ""
		srv, err := pgserver.StartWith(ctx, pgserver.Options{Durable: durable})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: no PostgreSQL for the tests: %v\n", err)
			return 1
		}
		defer srv.Stop()
		dsn = srv.DSN()
		os.Setenv(pgserver.EnvDSN, dsn)
	}
	return m.Run()
}

// DSN returns the server's DSN. It fails the test if Main did not run.
func DSN(t testing.TB) string {
	t.Helper()
	if dsn == "" {
		t.Fatal("pgtest: DSN called without pgtest.Main in TestMain")
	}
	return dsn
}

// Open opens a pool on the test server with drv and closes it at the end of
// the test.
func Open(t testing.TB, drv leasework.Driver) *sql.DB {
	t.Helper()
	db, err := drv.Open(DSN(t))
	if err != nil {
		t.Fatalf("open %s: %v", drv.Name(), err)
	}
	// As docs/operations.md advises for a worker's pool: database/sql keeps two
	// idle connections by default, and a worker under test would set the
	// others up again for nearly every statement.
	db.SetMaxIdleConns(maxIdleConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// maxIdleConns is how many idle connections a test pool keeps: more than
// any test's worker uses at once.
const maxIdleConns = 32

// SchemaName returns a fresh schema name for one test.
func SchemaName() string {
	return "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// Store returns a migrated store in a fresh schema of its own, dropped at
// the end of the test.
func Store(t testing.TB, drv leasework.Driver, opts lease.Options) *lease.Store {
	t.Helper()
	db := Open(t, drv)
	if opts.Schema == "" {
		opts.Schema = SchemaName()
	}
	s, err := lease.New(db, drv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropSchema(context.Background()); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return s
}

// Enqueue enqueues events in a transaction of their own and commits it,
// failing the test on any error.
func Enqueue(t testing.TB, s *lease.Store, events ...lease.Event) []lease.Enqueued {
	t.Helper()
	out, err := EnqueueCommitted(context.Background(), s, events...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// EnqueueCommitted enqueues events in a transaction of their own and
// commits it; for goroutines, which must not fail the test themselves.
func EnqueueCommitted(ctx context.Context, s *lease.Store, events ...lease.Event) ([]lease.Enqueued, error) {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	out, err := s.Enqueue(ctx, tx, events...)
	if err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// EnqueueShuffled runs enqueuers goroutines at once, each making rounds
// calls of enqueue with one event of kind "k" per key, the keys in an order
// drawn from seed and the enqueuer's number g; each event's payload is
// "g:round". It reports every error as a test error, naming the enqueuer
// and the round.
func EnqueueShuffled(t *testing.T, seed uint64, keys []string, enqueuers, rounds int, enqueue func(g int, events []lease.Event) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, enqueuers)
	for g := range enqueuers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := range rounds {
				events := make([]lease.Event, len(keys))
				for k, p := range rng.Perm(len(keys)) {
					events[k] = lease.Event{Kind: "k", Key: keys[p], Payload: fmt.Appendf(nil, "%d:%d", g, i)}
				}
				if err := enqueue(g, events); err != nil {
					errs <- fmt.Errorf("enqueuer %d round %d: %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// EnqueueN enqueues n events of kind with nothing else set, in one
// transaction, like [Enqueue].
func EnqueueN(t testing.TB, s *lease.Store, n int, kind string) []lease.Enqueued {
	t.Helper()
	events := make([]lease.Event, n)
	for i := range events {
		events[i] = lease.Event{Kind: kind}
	}
	return Enqueue(t, s, events...)
}

// Driver is one of the shipped drivers, by the name the CLI and the examples
// know it by, made fresh for each use.
type Driver struct {
	Name string
	New  func() leasework.Driver
}

// Drivers are the shipped drivers; tests that must hold for each run
// through all of them.
var Drivers = []Driver{
	{"pgx", func() leasework.Driver { return pgxdriver.New() }},
	{"pq", func() leasework.Driver { return pqdriver.New() }},
}

// EachDriver runs f as a subtest per shipped driver.
func EachDriver(t *testing.T, f func(t *testing.T, drv leasework.Driver)) {
	for _, d := range Drivers {
		t.Run(d.Name, func(t *testing.T) { f(t, d.New()) })
	}
}

// EnqueuePath is one way an enqueue in a *sql.Tx writes its events: a
// driver, and the store's Options.EnqueueCopyMin.
type EnqueuePath struct {
	Name      string
	NewDriver func() leasework.Driver
	CopyMin   int
	Copies    bool // whether its batches go in with COPY
}

// Options is opts with the path's EnqueueCopyMin.
func (p EnqueuePath) Options(opts lease.Options) lease.Options {
	opts.EnqueueCopyMin = p.CopyMin
	return opts
}

// EnqueuePaths are the ways an enqueue in a *sql.Tx writes its events:
// the INSERT through each driver (pgx through database/sql has no COPY,
// whatever EnqueueCopyMin says), and lib/pq's COPY for every batch. Tests
// of the enqueue's promises run through each.
var EnqueuePaths = []EnqueuePath{
	{"pgx", func() leasework.Driver { return pgxdriver.New() }, 1, false},
	{"pq", func() leasework.Driver { return pqdriver.New() }, -1, false},
	{"pq-copy", func() leasework.Driver { return pqdriver.New() }, 1, true},
}

// EachEnqueuePath runs f as a subtest per enqueue path.
func EachEnqueuePath(t *testing.T, f func(t *testing.T, p EnqueuePath)) {
	for _, p := range EnqueuePaths {
		t.Run(p.Name, func(t *testing.T) { f(t, p) })
	}
}

// WatchInserts records how each statement that inserts into s's table
// reached it, with a statement trigger of the test's: it returns a
// function that counts them, those that were a COPY and the others.
func WatchInserts(t testing.TB, s *lease.Store) func() (copies, inserts int) {
	t.Helper()
	ctx := context.Background()
	log := lease.QuoteIdent(s.Schema()) + ".test_insert_log"
	fn := lease.QuoteIdent(s.Schema()) + ".test_log_insert"
	for _, q := range []string{
		`CREATE TABLE ` + log + ` (copy boolean NOT NULL)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO ` + log + ` VALUES (current_query() ~* '^\s*copy\M'); RETURN NULL; END $$`,
		`CREATE TRIGGER test_log_insert AFTER INSERT ON ` + s.QualifiedTable() + ` FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("WatchInserts: %v", err)
		}
	}
	return func() (copies, inserts int) {
		t.Helper()
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE copy), count(*) FILTER (WHERE NOT copy) FROM `+log).Scan(&copies, &inserts); err != nil {
			t.Fatalf("WatchInserts: %v", err)
		}
		return copies, inserts
	}
}
