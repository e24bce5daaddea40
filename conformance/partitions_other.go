//go:build !unix || aix

package conformance

import (
	"context"
	"sync/atomic"

	"github.com/leasework/leasework/lease"
)

// holderChild says whether this process is a child of the partition
// properties: never, where there are none.
func (e *env) holderChild() bool { return false }

// childHolders are no children on this system.
type childHolders struct{}

func (e *env) holdInChildren(killed, stopped lease.Enqueued) *childHolders {
	e.t.Log("no child holders: this system lacks SIGKILL and SIGSTOP, and a wait that reports a stopped child")
	return &childHolders{}
}

func (h *childHolders) during(context.Context, *atomic.Int64, int64) error { return nil }

func (h *childHolders) close() {}

func killedPartitionHolderFreesItsPlace(e *env) {
	e.t.Skip("needs SIGKILL, which this system lacks")
}

func pausedPartitionHolderIsRefused(e *env) {
	e.t.Skip("needs SIGSTOP and a wait that reports a stopped child (WUNTRACED), which this system lacks")
}
