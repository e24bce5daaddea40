//go:build unix

package conformance

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/leasework/leasework"
)

const roleKillChild = "kill-child"

// A child process claims one row in autocommit mode and prints the claim;
// only after reading it does the parent send SIGKILL. The committed claim
// reads INPROGRESS generation 1; after the lease fixture expires, the next
// claim returns the same row and event id with generation 2.
func killedWorkerClaimIsRecovered(e *env) {
	if os.Getenv(envRole) == roleKillChild {
		killChild(e)
		return
	}
	ev := e.enqueueN(1)[0]

	cmd := exec.CommandContext(e.ctx, os.Args[0], "-test.run="+runPattern(e.t.Name()), "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envRole+"="+roleKillChild, envDSN+"="+e.target.DSN, envSchema+"="+e.schema)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start child: %v", err)
	}
	defer cmd.Process.Kill() // only matters if the test fails before the kill

	var id, gen int64
	var eventID string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "LEASEWORK-CLAIM id=%d event=%s generation=%d", &id, &eventID, &gen); err == nil {
			break
		}
	}
	if id == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		e.t.Fatalf("child exited before printing its claim (scan error %v)", sc.Err())
	}
	if id != ev.ID || eventID != "event-001" || gen != 1 {
		e.t.Fatalf("child claimed row %d %s generation %d; want row %d event-001 generation 1", id, eventID, gen, ev.ID)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatalf("SIGKILL: %v", err)
	}
	go func() { // drain, so the child is never blocked on a full pipe
		for sc.Scan() {
		}
	}()
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		e.t.Fatalf("child did not die of SIGKILL: %v (%v)", err, cmd.ProcessState)
	}
	e.t.Logf("child %d died of SIGKILL (%v) after claiming row %d generation %d", cmd.Process.Pid, ws.Signal(), id, gen)

	e.wantState(id, leasework.StatusInProgress, 1)
	e.expire(id) // fixture: the dead worker's lease runs out
	c := e.claimOne()
	if c.ID != id || c.EventID != "event-001" || c.Generation != 2 {
		e.t.Fatalf("reclaim = row %d %s generation %d; want row %d event-001 generation 2", c.ID, c.EventID, c.Generation, id)
	}
	if !c.Reclaimed || c.Attempt != 2 {
		e.t.Fatalf("reclaim: Reclaimed %v attempt %d; want true and 2", c.Reclaimed, c.Attempt)
	}
}

// killChild is the child's side: claim, print, wait to be killed.
func killChild(e *env) {
	c := e.claimOne()
	fmt.Printf("LEASEWORK-CLAIM id=%d event=%s generation=%d\n", c.ID, c.EventID, c.Generation)
	os.Stdout.Sync()
	time.Sleep(10 * time.Minute)
	e.t.Fatal("child was not killed")
}

// runPattern is a -test.run pattern that matches exactly the named subtest.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
