//go:build unix

package conformance

import (
	"os"

	"github.com/leasework/leasework/lease"
)

// A process killed with SIGKILL while it holds the one slot of kind k's
// limit holds it until its lease runs out, and no longer. The child claims
// one row in autocommit mode (the limit declared before) and prints the
// claim; the parent kills it. While the dead child's lease runs, a claim
// takes nothing of kind k; once the fixture expires it, the next claim
// reclaims the child's row at its next generation, alone, and once that
// completes, the slot goes to the next row.
func killedLimitHolderFreesItsSlot(e *env) {
	if os.Getenv(envRole) == roleKillChild {
		killChild(e)
		return
	}
	e.setLimit(lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 1})
	evs := e.enqueueN(2)
	id, _, gen := e.claimInChildAndKill()
	if id != evs[0].ID || gen != e.gen(1) {
		e.t.Fatalf("child claimed row %d generation %d; want row %d generation %d", id, gen, evs[0].ID, e.gen(1))
	}
	if got := e.claim(10); len(got) != 0 {
		e.t.Fatalf("claim while the killed child's lease runs = %s; want nothing (it holds kind k's one slot)", eventIDs(got))
	}
	e.expire(id) // fixture: the dead child's lease runs out
	got := e.claim(10)
	if len(got) != 1 || got[0].ID != id || got[0].Generation != e.gen(2) || !got[0].Reclaimed {
		e.t.Fatalf("claim after the killed child's lease ran out = %+v; want its row %d alone, reclaimed at generation %d", got, id, e.gen(2))
	}
	wantOK(e.t, "complete", e.write(lease.Complete(got[0].Ref())))
	if next := e.claim(10); len(next) != 1 || next[0].ID != evs[1].ID {
		e.t.Fatalf("claim after the reclaimed row completed = %+v; want row %d", next, evs[1].ID)
	}
}
