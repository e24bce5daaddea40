// Package tune lets this repository's test rigs change thresholds of a
// worker that no user sets, so that a rig reaches the paths they guard:
// the chaos soak's workers have a dozen slots, and never gather the batch
// of outcomes from which a worker writes them as two statements at once.
//
// Package framework sets the functions when it is initialized; in a
// program that does not import it they are nil.
package tune

// SplitFrom makes w, a *framework.Worker not yet run, write a batch of
// outcomes whose completions take turns as two statements at once from n
// outcomes on (at least 2), and call split, when it is not nil, with the
// size of each batch it so writes.
var SplitFrom func(w any, n int, split func(outcomes int))
