//go:build unix && !aix

package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// holderChild runs the side of a child process of the partition
// properties, when this process is one, and says whether it was.
func (e *env) holderChild() bool {
	switch os.Getenv(envRole) {
	case roleKillChild:
		killChild(e)
	case roleLateChild:
		lateChild(e)
	default:
		return false
	}
	return true
}

// childHolders are the two children of
// PartitionLimitHoldsUnderConcurrentClaims: one killed with SIGKILL while
// it holds a row, one stopped with SIGSTOP.
type childHolders struct {
	e      *env
	killed leasework.Ref
	late   *lateHolder
}

// holdInChildren makes a child claim the row of killed and die of
// SIGKILL, and another claim the row of stopped and stop (SIGSTOP).
func (e *env) holdInChildren(killed, stopped lease.Enqueued) *childHolders {
	e.t.Helper()
	id, _, gen := e.claimInChildAndKill()
	if id != killed.ID || gen != e.gen(1) {
		e.t.Fatalf("the child to kill claimed row %d generation %d; want row %d generation %d", id, gen, killed.ID, e.gen(1))
	}
	h := &childHolders{e: e, killed: leasework.Ref{ID: id, Generation: gen}}
	h.late = e.startLateChild()
	if h.late.id != stopped.ID || h.late.gen != e.gen(1) {
		h.late.kill()
		e.t.Fatalf("the child to stop claimed row %d generation %d; want row %d generation %d", h.late.id, h.late.gen, stopped.ID, e.gen(1))
	}
	if err := h.late.stop(); err != nil {
		h.late.kill()
		e.t.Fatal(err)
	}
	e.t.Logf("child %d stopped holding row %d generation %d; the killed child held row %d", h.late.pid, h.late.id, h.late.gen, id)
	return h
}

// during runs while the claimers do: once a quarter of the rows are done,
// the fixture expires the dead child's lease; once a third, the stopped
// child's, and when its row was claimed again, the child is continued:
// its late writes must all be refused.
func (h *childHolders) during(run context.Context, done *atomic.Int64, total int64) error {
	e := h.e
	reached := func(n int64) bool {
		for done.Load() < n {
			select {
			case <-run.Done():
				return false
			case <-time.After(5 * time.Millisecond):
			}
		}
		return true
	}
	if !reached(total / 4) {
		return nil
	}
	if err := leasetest.ExpireLease(e.ctx, e.fix, h.killed.ID); err != nil { // fixture: the dead child's lease runs out
		return err
	}
	if err := e.write(lease.Complete(h.killed)); !errors.Is(err, leasework.ErrLeaseLost) {
		return fmt.Errorf("the dead child's completion of row %d after its lease ran out: %v; want ErrLeaseLost", h.killed.ID, err)
	}
	if !reached(total / 3) {
		return nil
	}
	if err := leasetest.ExpireLease(e.ctx, e.fix, h.late.id); err != nil { // fixture: the stopped child's lease runs out
		return err
	}
	for {
		r, err := e.fix.Get(e.ctx, h.late.id)
		if err != nil {
			return err
		}
		if r.Generation > h.late.gen {
			break
		}
		select {
		case <-run.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	late, err := h.late.wake()
	if err != nil {
		return err
	}
	if late != lateRefused {
		return fmt.Errorf("the woken child's writes, after its row was claimed again: %q; want %q", late, lateRefused)
	}
	return nil
}

func (h *childHolders) close() { h.late.kill() }

// A process killed with SIGKILL while it holds the one place of partition
// acme (its own limit of 1) holds it until its lease runs out, and no
// longer; the dead owner's late completion is refused.
//
// Taken back by its own queue: while the dead child's lease runs, claims
// take an event of no partition and nothing of acme, whose next event
// they set aside (WAITING); once the fixture expires the lease, the next
// claim takes the child's row back at its next generation, alone, with
// its place (the event set aside stays so), and once that completes, the
// next claims (three at most, placeClaims) take the event set aside.
//
// Taken by another queue's claim: a second child claims an event of acme
// of the default queue and is killed; claims of queue other take nothing
// of acme's two events there and set them aside; once the lease is
// expired, three claims of queue other (without floors, as a worker's
// sweep) take exactly one of them (either: a partition's events have no
// order), with the dead child's place. The child's
// row, expired, then needs a place: claims of the default queue take it
// back only once that event completed.
func killedPartitionHolderFreesItsPlace(e *env) {
	if e.holderChild() {
		return
	}
	e.setPartitionLimit("acme", 1)
	evs := e.enqueue(partitionEvent("acme", "", 0), partitionEvent("acme", "", 1), partitionEvent("", "", 0))
	id, _, gen := e.claimInChildAndKill()
	if id != evs[0].ID || gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d generation %d; want row %d generation %d", id, gen, evs[0].ID, e.gen(1))
	}
	dead := leasework.Ref{ID: id, Generation: gen}
	other := e.wantRounds("claims while the killed child's lease runs", "", evs[2].ID)
	e.wantSetAside("acme's second event, behind the killed child's", evs[1].ID)
	wantOK(e.t, "complete "+other[0].EventID, e.write(lease.Complete(other[0].Ref())))

	e.expire(id) // fixture: the dead child's lease runs out
	wantLost(e.t, "the dead child's late completion", e.write(lease.Complete(dead)))
	back := e.claim(10)
	if len(back) != 1 || back[0].ID != id || back[0].Generation != e.gen(2) || !back[0].Reclaimed {
		e.t.Fatalf("claim after the killed child's lease ran out = %+v; want its row %d alone, reclaimed at generation %d", back, id, e.gen(2))
	}
	e.wantRounds("claims while the reclaimed row holds acme's place", "")
	wantOK(e.t, "complete the reclaimed row", e.write(lease.Complete(back[0].Ref())))
	wantLost(e.t, "the dead child's late completion after its row ended", e.write(lease.Complete(dead)))
	next := e.wantRounds("claims after the reclaimed row completed", "", evs[1].ID)
	wantOK(e.t, "complete "+next[0].EventID, e.write(lease.Complete(next[0].Ref())))

	// Taken by another queue's claim.
	evs = e.enqueue(partitionEvent("acme", "", 2), partitionEvent("acme", "other", 0), partitionEvent("acme", "other", 1))
	id, _, gen = e.claimInChildAndKill()
	if id != evs[0].ID || gen != e.gen(1) {
		e.t.Fatalf("second child claimed row %d generation %d; want row %d generation %d", id, gen, evs[0].ID, e.gen(1))
	}
	dead = leasework.Ref{ID: id, Generation: gen}
	e.wantRounds("claims of queue other while the second child's lease runs", "other")
	e.wantSetAside("acme's events of queue other", evs[1].ID, evs[2].ID)
	e.expire(id) // fixture: the dead child's lease runs out
	reused, rest := e.wantOneOfRounds("claims of queue other after the second child's lease ran out", "other", evs[1].ID, evs[2].ID)
	wantLost(e.t, "the second dead child's late completion", e.write(lease.Complete(dead)))
	e.wantRounds("claims of the default queue while its place is reused", "")
	e.wantState(id, leasework.StatusInProgress, e.gen(1))
	wantOK(e.t, "complete "+reused[0].EventID, e.write(lease.Complete(reused[0].Ref())))
	back = e.wantRounds("claims of the default queue once the place is free", "", id)
	if back[0].Generation != e.gen(2) || !back[0].Reclaimed {
		e.t.Fatalf("the second child's row taken back: %+v; want generation %d, reclaimed", back[0], e.gen(2))
	}
	wantOK(e.t, "complete the second child's row", e.write(lease.Complete(back[0].Ref())))
	last := e.wantRounds("claims of queue other at the end", "other", rest)
	wantOK(e.t, "complete "+last[0].EventID, e.write(lease.Complete(last[0].Ref())))
}

// A process stopped with SIGSTOP while it holds the one place of
// partition acme (under a default limit of 1) loses it when its lease
// runs out, to an event of another queue, and its writes when it wakes
// are refused. The child claims an event of acme of the default queue
// and is stopped; claims of queue other take nothing of acme's two events
// there, and set them aside; once the fixture expires the child's lease,
// three claims of queue other take exactly one of them (either), with the
// child's place. The child, continued, writes a completion, a renewal and a
// release: each is refused with ErrLeaseLost, and its row is as it was.
// The row then needs a place: claims of the default queue take nothing
// while the other event runs, then take the row back at its next
// generation; and the last event of acme runs after it.
func pausedPartitionHolderIsRefused(e *env) {
	if e.holderChild() {
		return
	}
	e.setPartitionLimit("", 1)
	evs := e.enqueue(partitionEvent("acme", "", 0), partitionEvent("acme", "other", 0), partitionEvent("acme", "other", 1))
	child := e.startLateChild()
	defer child.kill()
	if child.id != evs[0].ID || child.gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d generation %d; want row %d generation %d", child.id, child.gen, evs[0].ID, e.gen(1))
	}
	wantOK(e.t, "stop the child", child.stop())
	e.wantRounds("claims of queue other while the stopped child's lease runs", "other")
	e.wantSetAside("acme's events of queue other", evs[1].ID, evs[2].ID)

	e.expire(child.id) // fixture: the stopped child's lease runs out
	reused, rest := e.wantOneOfRounds("claims of queue other after the stopped child's lease ran out", "other", evs[1].ID, evs[2].ID)
	late, err := child.wake()
	wantOK(e.t, "wake the child", err)
	if late != lateRefused {
		e.t.Fatalf("the woken child's writes: %q; want %q", late, lateRefused)
	}
	e.wantState(child.id, leasework.StatusInProgress, e.gen(1))
	e.wantRounds("claims of the default queue while the child's place is reused", "")
	wantOK(e.t, "complete "+reused[0].EventID, e.write(lease.Complete(reused[0].Ref())))
	back := e.wantRounds("claims of the default queue once the place is free", "", child.id)
	if back[0].Generation != e.gen(2) || !back[0].Reclaimed {
		e.t.Fatalf("the child's row taken back: %+v; want generation %d, reclaimed", back[0], e.gen(2))
	}
	wantLost(e.t, "a late completion by the woken child's claim", e.write(lease.Complete(leasework.Ref{ID: child.id, Generation: child.gen})))
	wantOK(e.t, "complete the child's row", e.write(lease.Complete(back[0].Ref())))
	last := e.wantRounds("claims of queue other at the end", "other", rest)
	wantOK(e.t, "complete "+last[0].EventID, e.write(lease.Complete(last[0].Ref())))
}
