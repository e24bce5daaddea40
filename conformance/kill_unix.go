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
	"github.com/leasework/leasework/lease"
)

const roleKillChild = "kill-child"

// A child process claims one row in autocommit mode and prints the claim;
// only after reading it does the parent send SIGKILL. The committed claim
// reads INPROGRESS at the row's first generation (1 on a server never
// promoted); after the lease fixture expires, the next claim returns the
// same row and event id at the next generation.
func killedWorkerClaimIsRecovered(e *env) {
	if os.Getenv(envRole) == roleKillChild {
		killChild(e)
		return
	}
	ev := e.enqueueN(1)[0]
	id, eventID, gen := e.claimInChildAndKill()
	if id != ev.ID || eventID != "event-001" || gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d %s generation %d; want row %d event-001 generation %d", id, eventID, gen, ev.ID, e.gen(1))
	}

	e.wantState(id, leasework.StatusInProgress, e.gen(1))
	e.expire(id) // fixture: the dead worker's lease runs out
	c := e.claimOne()
	if c.ID != id || c.EventID != "event-001" || c.Generation != e.gen(2) {
		e.t.Fatalf("reclaim = row %d %s generation %d; want row %d event-001 generation %d", c.ID, c.EventID, c.Generation, id, e.gen(2))
	}
	if !c.Reclaimed || c.Attempt != 2 {
		e.t.Fatalf("reclaim: Reclaimed %v attempt %d; want true and 2", c.Reclaimed, c.Attempt)
	}
}

// A head killed by SIGKILL holds its key: its followers are not claimed,
// neither while its lease runs nor when it has expired; the next claim
// takes the head again (its second generation), and only its completion lets the
// next event of the key be claimed.
func killedHeadIsClaimedBeforeFollowers(e *env) {
	if os.Getenv(envRole) == roleKillChild {
		killChild(e)
		return
	}
	evs := e.enqueue(
		lease.Event{Kind: "k", EventID: "event-001", Key: "order-1"},
		lease.Event{Kind: "k", EventID: "event-002", Key: "order-1"},
		lease.Event{Kind: "k", EventID: "event-003", Key: "order-1"})
	id, _, gen := e.claimInChildAndKill()
	if id != evs[0].ID || gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d generation %d; want the head, row %d generation %d", id, gen, evs[0].ID, e.gen(1))
	}
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claimed %d rows while the killed head's lease runs, want none", len(got))
	}
	e.expire(id) // fixture: the dead worker's lease runs out
	got := e.claim(10)
	if len(got) != 1 || got[0].ID != id || got[0].Generation != e.gen(2) || !got[0].Reclaimed {
		e.t.Fatalf("after expiry claimed %+v; want only the head, row %d, reclaimed at generation %d", got, id, e.gen(2))
	}
	e.wantState(evs[1].ID, leasework.StatusWaiting, 0)
	wantOK(e.t, "complete head", e.write(lease.Complete(got[0].Ref())))
	next := e.claim(10)
	if len(next) != 1 || next[0].ID != evs[1].ID {
		e.t.Fatalf("after the head completed claimed %+v; want only row %d", next, evs[1].ID)
	}
	e.wantState(evs[2].ID, leasework.StatusWaiting, 0)
}

// claimInChildAndKill starts a child that claims one row in autocommit mode
// and prints the claim, reads it, kills the child with SIGKILL and checks it
// died of it. It returns the child's claim.
func (e *env) claimInChildAndKill() (id int64, eventID string, gen int64) {
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
	return id, eventID, gen
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
