package framework_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

// The child worker process: the test binary run again with these set.
const (
	childModeEnv   = "LEASEWORK_FRAMEWORK_CHILD" // "kill" or "stop"
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildWorker$")
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

// waitStopped waits until the kernel reports the process stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, "the child to stop", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the parenthesized command name.
		i := strings.LastIndexByte(string(stat), ')')
		return i > 0 && strings.HasPrefix(string(stat[i+1:]), " T")
	})
}

// A worker process stopped past its lease and resumed after another worker
// claimed its rows cannot complete, retry or renew them.
func TestPausedWorkerCannotCompleteRetryOrRenew(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see that the child is stopped")
	}
	s := newStore(t, drivers[0].new())
	ctx := context.Background()
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "complete"}, lease.Event{Kind: "retry"})
	c := startChild(t, "stop", s)
	for range 2 {
		c.expect(t, "claimed ")
	}
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	for _, e := range ids {
		if err := leasetest.ExpireLease(ctx, s, e.ID); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2, Lease: time.Minute, Worker: "rival"})
	if err != nil || len(claims) != 2 || claims[0].Generation != 2 || claims[1].Generation != 2 {
		t.Fatalf("rival claim = %+v, %v; want both rows at generation 2", claims, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c.stdin, "resume")

	var res childResult
	if err := json.Unmarshal([]byte(c.expect(t, "result ")), &res); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	t.Logf("child: context causes %v, counters %+v", res.Causes, res.Counters)
	for kind, cause := range res.Causes {
		if cause != leasework.ErrLeaseLost.Error() {
			t.Errorf("child's %s handler: context cause %q; want %q", kind, cause, leasework.ErrLeaseLost)
		}
	}
	k := res.Counters
	if len(res.Causes) != 2 || k.StaleRejections != 2 || k.LeasesLost != 2 || k.LocalLeaseTimeouts != 0 ||
		k.Completed != 0 || k.Retried != 0 || k.Failed != 0 || k.Released != 0 {
		t.Errorf("child: causes %v, counters %+v; want 2 renewals rejected (leases lost), 2 stale outcome writes, nothing written", res.Causes, k)
	}
	for _, cl := range claims {
		r, err := s.Get(ctx, cl.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != leasework.StatusInProgress || r.Generation != 2 || r.Worker != "rival" || r.LastError != "" {
			t.Errorf("row %d: %s generation %d worker %q error %q; want the rival's untouched claim", r.ID, r.Status, r.Generation, r.Worker, r.LastError)
		}
	}
	res2, err := s.CompleteMany(ctx, []leasework.Ref{claims[0].Ref(), claims[1].Ref()})
	if err != nil || res2[0].Err != nil || res2[1].Err != nil {
		t.Fatalf("the rival's completion = %+v, %v; want accepted", res2, err)
	}
}

// A worker killed with SIGKILL on every attempt uses up the row's budget:
// after exactly max_attempts claims the row is FAILED with a reason naming
// the expired lease, and nobody runs it again.
func TestWorkerKilledOnEveryAttemptEndsFailed(t *testing.T) {
	s := newStore(t, drivers[0].new())
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

// TestChildWorker is the worker process of the tests above; it does
// nothing in a normal test run.
func TestChildWorker(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("runs only as a child process of the process tests")
	}
	drv := drivers[0].new()
	db := pgtest.Open(t, drv)
	cfg := framework.Config{
		Schema: os.Getenv(childSchemaEnv), Retention: -1, Concurrency: 2,
		PollInterval: 20 * time.Millisecond, RenewEvery: 50 * time.Millisecond,
	}
	w, err := framework.New(db, drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	if mode == "kill" {
		register(t, w, "k", framework.RetryPolicy{}, func(ctx context.Context, c *leasework.Claim) error {
			say("claimed %d %d %d", c.ID, c.Generation, c.Attempt)
			select {} // until killed
		})
		_ = w.Run(context.Background())
		return
	}

	resume := make(chan struct{})
	causes := map[string]string{}
	handler := func(ctx context.Context, c *leasework.Claim) error {
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
	}
	register(t, w, "complete", framework.RetryPolicy{}, handler)
	register(t, w, "retry", framework.RetryPolicy{}, handler)
	stop := start(t, w)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	close(resume)
	waitFor(t, "both late outcomes to be rejected", func() bool { return w.Counters().StaleRejections == 2 })
	stop()
	out.Lock()
	defer out.Unlock()
	b, err := json.Marshal(childResult{Causes: causes, Counters: w.Counters()})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("result %s\n", b)
}
