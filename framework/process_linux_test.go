//go:build linux

package framework_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

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
	s := newStore(t, pgtest.Drivers[0].New())
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
	res2, err := s.WriteMany(ctx, lease.Complete(claims[0].Ref()), lease.Complete(claims[1].Ref()))
	if err != nil || res2[0].Err != nil || res2[1].Err != nil {
		t.Fatalf("the rival's completion = %+v, %v; want accepted", res2, err)
	}
}
