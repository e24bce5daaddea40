//go:build !unix || aix

package conformance

func pausedLimitHolderIsRefused(e *env) {
	e.t.Skip("needs SIGSTOP and a wait that reports a stopped child (WUNTRACED), which this system lacks")
}
