package leaseworktest_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder is a testing.TB whose Fatal and Fatalf record the failure and
// end the goroutine, as testing's do, so that a test can check how a
// helper fails. Everything else goes to the real test.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.failed = msg
	r.mu.Unlock()
	runtime.Goexit()
}

// failure runs f with a recorder in a goroutine of its own and returns the
// message it failed with, or "" if it did not fail.
func failure(t *testing.T, f func(t testing.TB)) string {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
