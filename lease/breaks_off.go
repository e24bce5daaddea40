//go:build !leasework_break

package lease

// breakQueries does nothing: the library is broken on purpose only in a
// build with the leasework_break tag, for the chaos soak to show that its
// history checker catches each break (breaks_on.go).
func breakQueries(*queries) {}
