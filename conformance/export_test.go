package conformance

import "time"

// SetDeadConnBound sets how long the dead-connection properties wait for
// a call to return by itself. The self-test shortens it for a driver it
// knows waits forever, so that the failure it expects comes sooner; call
// it before Run.
func SetDeadConnBound(d time.Duration) { deadConnBound = d }
