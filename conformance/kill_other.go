//go:build !unix

package conformance

func killedWorkerClaimIsRecovered(e *env) {
	e.t.Skip("needs SIGKILL, which this system lacks")
}

func killedHeadIsClaimedBeforeFollowers(e *env) {
	e.t.Skip("needs SIGKILL, which this system lacks")
}

func killedLimitHolderFreesItsSlot(e *env) {
	e.t.Skip("needs SIGKILL, which this system lacks")
}
