//go:build !leasework_break

package framework

import (
	"context"
	"database/sql"
)

// The library is broken on purpose only in a build with the
// leasework_break tag, for the chaos soak to show that its history checker
// catches each break (breaks_on.go). In every other build these do
// nothing.

// breakTx reports false: Transactional completes and commits as it says.
func breakTx(context.Context, *attempt, *sql.Tx) (handled bool, err error) { return false, nil }

// breakFiringID returns id: a firing's event id is its schedule's name and
// fire time.
func breakFiringID(id, _ string) string { return id }

// breakFloors returns full: a sweep, or a claim of the loop without
// floors yet, reads from the oldest.
func breakFloors(_ *floors, full bool) bool { return full }
