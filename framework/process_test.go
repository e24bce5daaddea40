package framework_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The child worker process: the test binary run again with these set.
const (
	childModeEnv   = "LEASEWORK_FRAMEWORK_CHILD" // "kill", "step", "stop", "hang" or "tx"
	childSchemaEnv = "LEASEWORK_FRAMEWORK_CHILD_SCHEMA"
)

// child is a worker process started by a test.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, mode string, s *lease.Store) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childSchemaEnv+"="+s.Schema())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// expect returns the next line of the child's output that starts with
// prefix, without the prefix.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before printing %q", prefix)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return rest
			}
		case <-timeout:
			t.Fatalf("timed out waiting for the child's %q line", prefix)
		}
	}
}

// A worker killed with SIGKILL on every attempt uses up the row's budget:
// after exactly max_attempts claims the row is FAILED with a reason naming
// the expired lease, and nobody runs it again.
func TestWorkerKilledOnEveryAttemptEndsFailed(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ctx := context.Background()
	const budget = 3
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: budget})[0].ID
	for attempt := 1; attempt <= budget; attempt++ {
		c := startChild(t, "kill", s)
		var gotID, gen, att int64
		if _, err := fmt.Sscan(c.expect(t, "claimed "), &gotID, &gen, &att); err != nil {
			t.Fatal(err)
		}
		if gotID != id || gen != int64(attempt) || att != int64(attempt) {
			t.Fatalf("child %d claimed row %d generation %d attempt %d; want row %d, both %d", attempt, gotID, gen, att, id, attempt)
		}
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := c.cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child %d: %v; want death by SIGKILL", attempt, err)
		}
		waitChildSessionsGone(t, s)
		if err := leasetest.ExpireLease(ctx, s, id); err != nil {
			t.Fatal(err)
		}
	}
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		return leasework.Permanent(errors.New("claimed beyond its budget"))
	})
	start(t, w)
	r := waitRow(t, s, id, "the row to fail", func(r lease.Row) bool { return r.Status == leasework.StatusFailed })
	want := fmt.Sprintf("lease expired on attempt %d of %d", budget, budget)
	if r.LastError != want || r.Generation != budget || r.Attempt != budget || r.LeaseUntil != nil {
		t.Errorf("row: error %q generation %d attempt %d lease %v; want %q after %d claims", r.LastError, r.Generation, r.Attempt, r.LeaseUntil, want, budget)
	}
	if n := w.Counters().Claimed; n != 0 {
		t.Errorf("the surviving worker claimed %d times; want 0", n)
	}
}

type childResult struct {
	Causes   map[string]string
	Counters framework.Counters
}

// childDSN is dsn with the application name that marks the sessions of
// the child worker of schema: waitChildSessionsGone waits for them.
func childDSN(dsn, schema string) string {
	name := "lwchild-" + schema
	if strings.Contains(dsn, "://") {
		if strings.Contains(dsn, "?") {
			return dsn + "&application_name=" + name
		}
		return dsn + "?application_name=" + name
	}
	return dsn + " application_name=" + name
}

// waitChildSessionsGone waits until the server has ended every session of
// the child worker of s's schema. A statement that a worker sent before it
// was killed still runs in the server, to its end, before the session
// notices the client is gone: a claim among them takes rows for nobody
// (their leases expire), which a test counting generations would see.
func waitChildSessionsGone(t *testing.T, s *lease.Store) {
	t.Helper()
	waitFor(t, "the killed child's sessions to end in the server", func() bool {
		var n int
		if err := s.DB().QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			"lwchild-"+s.Schema()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// childWorker is the worker process of the tests above: the test binary
// run again with childModeEnv set, dispatched from TestMain. It returns the
// process's exit status.
func childWorker(mode string) int {
	if mode == "tx" {
		return txChild()
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	drv := pgtest.Drivers[0].New()
	db, err := drv.Open(childDSN(os.Getenv(pgserver.EnvDSN), os.Getenv(childSchemaEnv)))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	cfg := framework.Config{
		Schema: os.Getenv(childSchemaEnv), Retention: -1, Concurrency: 2,
		PollInterval: 20 * time.Millisecond, RenewEvery: 50 * time.Millisecond,
		GracePeriod: hangGrace, StopTimeout: hangStopTimeout,
		// Warnings only, on the test's stderr: a child that cannot claim
		// says why.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	w, err := framework.New(db, drv, cfg)
	if err != nil {
		return fail(err)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	if mode == "hang" {
		return hangingChild(w, say)
	}
	if mode == "kill" {
		err := w.Register("k", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			say("claimed %d %d %d", c.ID, c.Generation, c.Attempt)
			select {} // until killed
		}), framework.RetryPolicy{})
		if err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("Run returned before the kill: %v", w.Run(context.Background())))
	}

	if mode == "step" {
		// Records step "reserve" (its result names this process and
		// generation), says so, and waits to be killed before its next.
		err := w.Register("k", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			got, err := framework.Step(ctx, "reserve", func(context.Context) (string, error) {
				return fmt.Sprintf("reserved by pid %d generation %d", os.Getpid(), c.Generation), nil
			})
			if err != nil {
				return err
			}
			say("stepped %d %d %s", c.ID, c.Generation, got)
			select {} // until killed
		}), framework.RetryPolicy{})
		if err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("Run returned before the kill: %v", w.Run(context.Background())))
	}

	resume := make(chan struct{})
	causes := map[string]string{}
	handler := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		say("claimed %s %d %d", c.Kind, c.ID, c.Generation)
		<-resume
		select {
		case <-ctx.Done():
		case <-time.After(waitTimeout):
		}
		out.Lock()
		causes[c.Kind] = fmt.Sprint(context.Cause(ctx))
		out.Unlock()
		if c.Kind == "retry" {
			return errors.New("late failure")
		}
		return nil
	})
	for _, kind := range []string{"complete", "retry"} {
		if err := w.Register(kind, handler, framework.RetryPolicy{}); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		cancel()
		return fail(err)
	}
	close(resume)
	deadline := time.Now().Add(waitTimeout)
	for w.Counters().StaleRejections < 2 {
		if time.Now().After(deadline) {
			cancel()
			return fail(fmt.Errorf("both late outcomes not rejected within %v: %+v", waitTimeout, w.Counters()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return fail(err)
	}
	out.Lock()
	defer out.Unlock()
	b, err := json.Marshal(childResult{Causes: causes, Counters: w.Counters()})
	if err != nil {
		return fail(err)
	}
	fmt.Printf("result %s\n", b)
	return 0
}

// The stop settings of the child workers, and so the bound within which a
// child must return from Run after SIGTERM: GracePeriod + StopTimeout.
const (
	hangGrace       = 100 * time.Millisecond
	hangStopTimeout = 300 * time.Millisecond
)

type hangResult struct {
	Counters framework.Counters
	Stop     time.Duration // from SIGTERM to Run's return
}

// hangingChild runs a worker whose handler ignores its context until
// SIGTERM, then reports how long Run took to return.
func hangingChild(w *framework.Worker, say func(string, ...any)) int {
	err := w.Register("k", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		say("claimed %d %d %d", c.ID, c.Generation, c.Attempt)
		select {} // ignores its context
	}), framework.RetryPolicy{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	signalled := make(chan time.Time, 1)
	go func() {
		<-ctx.Done()
		signalled <- time.Now()
	}()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	b, err := json.Marshal(hangResult{Counters: w.Counters(), Stop: time.Since(<-signalled)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	say("stopped %s", b)
	return 0
}

// A worker process whose handler ignores its context stops on SIGTERM
// within GracePeriod + StopTimeout, with status 0. Its claim is not
// released: the row stays INPROGRESS until its lease expires, and the next
// claim counts the hung attempt against the budget.
func TestSIGTERMStopsWorkerWithHungHandler(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ctx := context.Background()
	id := pgtest.Enqueue(t, s, lease.Event{Kind: "k", MaxAttempts: 3})[0].ID
	c := startChild(t, "hang", s)
	var gotID, gen, att int64
	if _, err := fmt.Sscan(c.expect(t, "claimed "), &gotID, &gen, &att); err != nil {
		t.Fatal(err)
	}
	if gotID != id || gen != 1 || att != 1 {
		t.Fatalf("child claimed row %d generation %d attempt %d; want row %d at 1, 1", gotID, gen, att, id)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var res hangResult
	if err := json.Unmarshal([]byte(c.expect(t, "stopped ")), &res); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child after SIGTERM: %v; want exit status 0", err)
	}
	// The bound is made of timers; the slack covers a loaded machine's
	// scheduling, not work.
	const bound = hangGrace + hangStopTimeout
	t.Logf("Run returned %v after SIGTERM (documented bound %v); counters %+v", res.Stop, bound, res.Counters)
	if res.Stop > bound+2*time.Second {
		t.Errorf("Run returned %v after SIGTERM; the documented bound is %v", res.Stop, bound)
	}
	if k := res.Counters; k.HungHandlers != 1 || k.Released != 0 || k.Claimed != 1 {
		t.Errorf("child's counters %+v; want 1 claim, 1 hung handler, nothing released", k)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != leasework.StatusInProgress || r.Generation != 1 {
		t.Fatalf("row after the child stopped: %s generation %d; want INPROGRESS at generation 1 until its lease expires", r.Status, r.Generation)
	}
	if err := leasetest.ExpireLease(ctx, s, id); err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, s, framework.Config{PollInterval: 20 * time.Millisecond})
	next := make(chan leasework.Claim, 1)
	register(t, w, "k", framework.RetryPolicy{}, func(_ context.Context, c *leasework.Claim) error {
		next <- *c
		return nil
	})
	start(t, w)
	if c := recv(t, next, "the next claim"); c.Generation != 2 || c.Attempt != 2 || !c.Reclaimed {
		t.Errorf("next claim: generation %d attempt %d reclaimed %v; want 2, 2, true", c.Generation, c.Attempt, c.Reclaimed)
	}
	waitRow(t, s, id, "completion", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
}
