package framework_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(childWorker(mode)) // a worker process of the process tests
	}
	before := goleak.IgnoreCurrent()
	pgtest.Main(m, func() error {
		// The tests that run alongside others have no check of their
		// own: whatever they leave running is found here.
		return goleak.Find(before)
	})
}

// alongside marks t, a top-level test, to run in parallel with the other
// tests that call it, once the serial tests are done: the tests that spend
// most of their time waiting (for leases, outages, chains of keyed
// events), so that their waits overlap. Each has a schema of its own and
// touches no process-wide state. A goroutine left over from one is found
// by TestMain's check at the end instead of newStore's after each test,
// which other tests running meanwhile would fail.
func alongside(t *testing.T) {
	inParallel.Store(t.Name(), true)
	t.Parallel()
}

var inParallel sync.Map // of top-level test names: those that called alongside

// newStore returns a migrated store in a fresh schema, and arranges for the
// test to fail if a goroutine started after it outlives the test's workers
// (at the end of the binary for a test that runs alongside others).
func newStore(t testing.TB, drv leasework.Driver) *lease.Store {
	t.Helper()
	if top, _, _ := strings.Cut(t.Name(), "/"); isParallel(top) {
		return pgtest.Store(t, drv, lease.Options{})
	}
	// Checked last, after the store's pool is closed (cleanups run last
	// registered first): an idle pgx connection in the pool may keep a
	// background reader waiting on its socket until the pool closes it.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	return pgtest.Store(t, drv, lease.Options{})
}

func isParallel(top string) bool {
	_, ok := inParallel.Load(top)
	return ok
}

// newWorker makes a worker on s's table. Its DONE rows are kept forever
// (Retention -1) unless the test sets Retention or DeleteAtCompletion; tests
// of the default configuration call framework.New themselves.
func newWorker(t testing.TB, s *lease.Store, cfg framework.Config) *framework.Worker {
	t.Helper()
	cfg.Schema, cfg.Table = s.Schema(), s.Table()
	if cfg.Retention == 0 && !cfg.DeleteAtCompletion {
		cfg.Retention = -1
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	w, err := framework.New(s.DB(), s.Driver(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testLogger returns a logger for a test's workers: debug logs on stderr
// with -v, none otherwise.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// execSQL runs statements on s's database, failing the test on error.
func execSQL(t testing.TB, s *lease.Store, query string, args ...any) {
	t.Helper()
	if _, err := s.DB().ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// ident quotes a name as an SQL identifier.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// register registers h for kind with p, failing the test on error.
func register(t testing.TB, w *framework.Worker, kind string, p framework.RetryPolicy, h leasework.HandlerFunc) {
	t.Helper()
	if err := w.Register(kind, h, p); err != nil {
		t.Fatal(err)
	}
}

// start runs w until the returned stop is called (or the test ends), and
// stop waits for Run to return.
func start(t testing.TB, w *framework.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("Run did not return within a minute of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitTimeout bounds every wait for a condition; reaching it fails the test.
const waitTimeout = 2 * time.Minute

// waitPoll is how often waitFor tries its condition: many conditions read
// the database, and a wait polls for as long as the worker under test
// takes, so polling faster only takes CPU from it.
const waitPoll = 20 * time.Millisecond

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(waitPoll)
	}
}

// waitRow polls row id until cond holds and returns it.
func waitRow(t *testing.T, s *lease.Store, id int64, what string, cond func(lease.Row) bool) lease.Row {
	t.Helper()
	var row lease.Row
	waitFor(t, what, func() bool {
		r, err := s.Get(context.Background(), id)
		if err != nil {
			if errors.Is(err, lease.ErrNotFound) {
				return false
			}
			t.Fatal(err)
		}
		row = r
		return cond(r)
	})
	return row
}

// recv waits for a value on ch.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
