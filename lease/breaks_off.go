//go:build !leasework_break

package lease

// breakQueries does nothing: the library is broken on purpose only in a
// build with the leasework_break tag, for the chaos soak to show that its
// history checker catches each break (breaks_on.go).
func breakQueries(*queries) {}

// breakMigration returns migration v's SQL as it is (breaks_on.go).
func breakMigration(_ int, sql string) string { return sql }
