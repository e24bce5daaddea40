//go:build linux

package chaos

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/leasework/leasework/internal/rig/history"
)

// breakEnv names a deliberate break of the library, for a run that shows
// the history checker catching it; the test binary must be built with the
// leasework_break tag (lease/breaks_on.go, framework/breaks_on.go), and
// the worker processes inherit the variable:
//
//	LEASEWORK_BREAK=steal-leases go test -tags leasework_break -run Soak -v ./internal/rig/chaos/
//
// Such a run passes when the history shows every property the break must
// violate violated, and prints the violations.
const breakEnv = "LEASEWORK_BREAK"

// libraryBreak is one deliberate break.
type libraryBreak struct {
	what       string
	properties []string // the history properties it must be caught by
}

var breaks = map[string]libraryBreak{
	"steal-leases":    {"the claim takes leases with less than 60% of their time left", []string{history.Owners}},
	"claim-waiting":   {"the claim takes WAITING rows, as if each were its key's head", []string{history.KeyOrder}},
	"cancel-releases": {"a cancel of a running attempt ends its row at once, passing its key on while the handler runs (issue 17, item 2)", []string{history.KeyOrder}},
	"cancel-finished": {"Cancel ends DONE rows too", []string{history.Terminal}},
	"tx-split":        {"Transactional commits the business writes apart from, and before, the guarded completion", []string{history.Effects, history.Cancels}},
	"tick-per-worker": {"a firing's event id names the worker that enqueued it", []string{history.Ticks}},
	"snooze-spends":   {"a snooze does not grow the budget", []string{history.Snoozes}},
	"retry-doubled":   {"a retry waits twice the delay it was given", []string{history.Retries}},
	"pause-ignored":   {"the claim takes rows of a paused queue", []string{history.Pauses}},
	"floors-only":     {"the worker's claims never read from the oldest once they have floors: a row due before its floor waits for ever", []string{history.Terminal}},

	"keys-listed-reversed":  {"the commit-time step puts a transaction's keyed rows in line last inserted first", []string{history.KeyOrder}},
	"limit-off-by-one":      {"the claim admits one attempt more than a concurrency limit allows, without a slot", []string{history.Limits}},
	"limit-handoff-doubled": {"a completion hands each place its rows held under a concurrency limit on to two rows", []string{history.Limits}},
	"limit-ignores-holder-lease": {"the claim takes the place of a holder whose lease ran out in its snapshot without locking the holder's row: a renewal committed meanwhile is missed",
		[]string{history.Limits}},
	"partition-off-by-one":        {"the claim admits one attempt more than a partition's room", []string{history.Partitions}},
	"rate-window-short":           {"the claim counts a rate limit's starts over half its period", []string{history.Rates}},
	"partition-rate-window-short": {"the claim counts a partition's rate limit's starts over half its period", []string{history.Rates}},
	"steps-not-handed":            {"a claim hands no steps: every attempt runs its steps again", []string{history.Steps}},
	"step-unguarded":              {"a step is recorded whatever the row's generation and lease: a stale owner's record is accepted", []string{history.Steps}},
	"fair-no-arrivals":            {"an insert brings no partition to a fair queue, whose claims take no row of a partition they do not know", []string{history.Terminal}},
}

// breakOf returns the break $LEASEWORK_BREAK names, "" for none.
func breakOf() (string, error) {
	name := os.Getenv(breakEnv)
	if name == "" {
		return "", nil
	}
	if _, ok := breaks[name]; !ok {
		var names []string
		for n := range breaks {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("%s=%q names no break; the breaks: %s", breakEnv, name, strings.Join(names, ", "))
	}
	if !breaksBuilt {
		return "", fmt.Errorf("%s=%s needs the library built broken: go test -tags leasework_break -run Soak ./internal/rig/chaos/", breakEnv, name)
	}
	return name, nil
}
