//go:build unix && !aix

package conformance

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

const roleLateChild = "late-child"

// A process stopped with SIGSTOP while it holds the one slot of kind k's
// limit loses it when its lease runs out, and its writes when it wakes
// are refused. The child claims one row and prints the claim; the parent
// stops it, and sees it stopped. While its lease runs, a claim takes
// nothing of kind k; once the fixture expires it, the next claim reclaims
// the row at its next generation. The parent then continues the child,
// which writes a completion and a renewal of its claim, and a release:
// each is refused with ErrLeaseLost, and the child exits 0. The row is
// still the new owner's, whose slot the late writes did not free (a claim
// still takes nothing); it ends DONE at the new owner's completion, and
// the slot goes to the next row.
func pausedLimitHolderIsRefused(e *env) {
	if os.Getenv(envRole) == roleLateChild {
		lateChild(e)
		return
	}
	e.setLimit(lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 1})
	evs := e.enqueueN(2)

	child := e.startLateChild()
	defer child.kill()
	if child.id != evs[0].ID || child.gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d generation %d; want row %d generation %d", child.id, child.gen, evs[0].ID, e.gen(1))
	}
	wantOK(e.t, "stop the child", child.stop())
	id := child.id

	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim while the stopped child's lease runs = %s; want nothing (it holds kind k's one slot)", eventIDs(got))
	}
	e.expire(id) // fixture: the stopped child's lease runs out
	got := e.claim(10)
	if len(got) != 1 || got[0].ID != id || got[0].Generation != e.gen(2) || !got[0].Reclaimed {
		e.t.Fatalf("claim after the stopped child's lease ran out = %+v; want its row %d alone, reclaimed at generation %d", got, id, e.gen(2))
	}
	newOwner := got[0]

	late, err := child.wake()
	wantOK(e.t, "wake the child", err)
	if late != lateRefused {
		e.t.Fatalf("the woken child's writes: %q; want %q", late, lateRefused)
	}

	e.wantState(id, leasework.StatusInProgress, e.gen(2))
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim after the woken child's refused writes = %s; want nothing (the new owner holds the slot)", eventIDs(got))
	}
	wantOK(e.t, "the new owner's completion", e.write(lease.Complete(newOwner.Ref())))
	e.wantState(id, leasework.StatusDone, e.gen(2))
	if next := e.claim(10); len(next) != 1 || next[0].ID != evs[1].ID {
		e.t.Fatalf("claim after the new owner completed = %+v; want row %d", next, evs[1].ID)
	}
}

// lateRefused is the line of a woken child whose every write was refused.
const lateRefused = "LEASEWORK-LATE complete=lost renew=lost release=lost"

// lateHolder is a child process that claimed one row (in autocommit mode,
// as lateChild does) and waits, to be stopped with SIGSTOP and woken to
// write late.
type lateHolder struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   *bufio.Scanner
	pid     int
	id, gen int64
	eventID string
}

// startLateChild starts a child in the role lateChild and reads its
// claim. The child runs the calling property's function again, which
// must hand the role to lateChild (or to a function that does the same)
// before anything else.
func (e *env) startLateChild() *lateHolder {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, os.Args[0], "-test.run="+runPattern(e.t.Name()), "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envRole+"="+roleLateChild, envDSN+"="+e.target.DSN, envSchema+"="+e.schema)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	wantOK(e.t, "child's stdin", err)
	stdout, err := cmd.StdoutPipe()
	wantOK(e.t, "child's stdout", err)
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start child: %v", err)
	}
	h := &lateHolder{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout), pid: cmd.Process.Pid}
	claimed, err := h.line("LEASEWORK-CLAIM ")
	if err != nil {
		h.kill()
		e.t.Fatal(err)
	}
	if _, err := fmt.Sscanf(claimed, "LEASEWORK-CLAIM id=%d event=%s generation=%d", &h.id, &h.eventID, &h.gen); err != nil {
		h.kill()
		e.t.Fatalf("child's claim %q: %v", claimed, err)
	}
	return h
}

// line returns the child's next line that starts with prefix.
func (h *lateHolder) line(prefix string) (string, error) {
	for h.lines.Scan() {
		if strings.HasPrefix(h.lines.Text(), prefix) {
			return h.lines.Text(), nil
		}
	}
	return "", fmt.Errorf("child's output ended before a line %q (scan error %v)", prefix, h.lines.Err())
}

// stop sends the child SIGSTOP and waits until it is seen stopped.
func (h *lateHolder) stop() error {
	if err := syscall.Kill(h.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP: %w", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(h.pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		return fmt.Errorf("child %d after SIGSTOP: status %v, %v; want stopped", h.pid, ws, err)
	}
	return nil
}

// wake tells the stopped child to write, continues it, and returns the
// line that says how its late writes went, once it exited with status 0.
func (h *lateHolder) wake() (string, error) {
	if _, err := io.WriteString(h.stdin, "write\n"); err != nil {
		return "", fmt.Errorf("tell the child to write: %w", err)
	}
	if err := syscall.Kill(h.pid, syscall.SIGCONT); err != nil {
		return "", fmt.Errorf("SIGCONT: %w", err)
	}
	late, err := h.line("LEASEWORK-LATE ")
	if err != nil {
		return "", err
	}
	go func() { // drain, so the child is never blocked on a full pipe
		for h.lines.Scan() {
		}
	}()
	if err := h.cmd.Wait(); err != nil {
		return late, fmt.Errorf("child after its late writes: %w; want exit status 0", err)
	}
	return late, nil
}

// kill ends the child whatever its state; it only matters when a
// property fails before the child exits.
func (h *lateHolder) kill() {
	syscall.Kill(h.pid, syscall.SIGCONT)
	h.cmd.Process.Kill()
}

// lateChild is the stopped child's side: claim and print the claim, wait
// for a line on stdin (the parent stops it meanwhile), then write a
// completion, a renewal and a release of the claim and print how each
// went.
func lateChild(e *env) {
	c := e.claimOne()
	fmt.Printf("LEASEWORK-CLAIM id=%d event=%s generation=%d\n", c.ID, c.EventID, c.Generation)
	os.Stdout.Sync()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		e.t.Fatalf("child: read the parent's go-ahead: %v", err)
	}
	verdict := func(err error) string {
		switch {
		case err == nil:
			return "accepted"
		case errors.Is(err, leasework.ErrLeaseLost):
			return "lost"
		default:
			return strings.Join(strings.Fields(err.Error()), "_")
		}
	}
	fmt.Printf("LEASEWORK-LATE complete=%s renew=%s release=%s\n",
		verdict(e.write(lease.Complete(c.Ref()))),
		verdict(e.write(lease.Renew(c.Ref(), testLease))),
		verdict(e.write(lease.Release(c.Ref()))))
	os.Stdout.Sync()
}
