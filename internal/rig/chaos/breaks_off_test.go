//go:build linux && !leasework_break

package chaos

// breaksBuilt: this test binary's library is built without its deliberate
// breaks (see breakEnv).
const breaksBuilt = false
