package conformance_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// envLimitTarget makes TestLimitSelfTest run the suite itself, in a child
// process, against the store it names.
const envLimitTarget = "LEASEWORK_LIMIT_SELFTEST_TARGET"

// limitPlusOne is the real store with one more slot than each limit it
// is given, and one more start than each rate limit: SetLimit and
// SetRateLimit declare Max + 1. Everything else is the real store's,
// which it embeds. It lives in this package's tests.
type limitPlusOne struct{ *lease.Store }

var _ conformance.Store = limitPlusOne{}

func (s limitPlusOne) SetLimit(ctx context.Context, l lease.Limit, by string) (int, error) {
	l.Max++
	return s.Store.SetLimit(ctx, l, by)
}

func (s limitPlusOne) SetRateLimit(ctx context.Context, l lease.RateLimit, by string) (lease.RateLimit, bool, error) {
	l.Max++
	return s.Store.SetRateLimit(ctx, l, by)
}

func newLimitPlusOne(db *sql.DB, drv leasework.Driver, opts lease.Options) (conformance.Store, error) {
	s, err := lease.New(db, drv, opts)
	if err != nil {
		return nil, err
	}
	return limitPlusOne{s}, nil
}

// limitResults are the results the limit properties must give on a store
// that admits one attempt more than each limit, and a control.
var limitResults = map[string]string{
	"LimitHoldsUnderConcurrentClaims":                "FAIL",
	"LimitSlotFreesAtLeaseEnd":                       "FAIL",
	"LimitComposesWithKeyOrder":                      "FAIL",
	"KilledLimitHolderFreesItsSlotAtLeaseEnd":        "FAIL",
	"PausedLimitHolderIsRefusedAfterItsSlotIsReused": "FAIL",

	"PartitionLimitHoldsUnderConcurrentClaims":            "FAIL",
	"KilledPartitionHolderFreesItsPlaceAtLeaseEnd":        "FAIL",
	"PausedPartitionHolderIsRefusedAfterItsPlaceIsReused": "FAIL",
	"PartitionLimitComposesWithKeyOrder":                  "FAIL",
	"SetAsideRowsAllRunOncePlacesFree":                    "FAIL",

	"RateLimitHoldsInEveryWindowUnderConcurrentClaims": "FAIL",
	"HeldBackRowsRunOnceTheWindowMovesOn":              "FAIL",
	"RateLimitComposesWithKeyOrder":                    "FAIL",
	"RetriesAndTakeBacksTakeStarts":                    "FAIL",
	"PartitionRateLimitHoldsInEveryWindow":             "FAIL",

	"ClaimThenComplete": "PASS",
}

// TestLimitSelfTest proves the limit properties can fail: in a child
// process, against a store whose every limit admits one attempt more than
// its Max, and every rate limit one start more (limitPlusOne), each of
// them fails, and a control passes. The single-claimer properties fail at
// their first claim past the limit; the concurrent ones when their reader
// or their claimers' tally sees Max + 1 live attempts, which eight (or
// four) claimers of batches of up to four (three) rows reach at once;
// PartitionLimitComposesWithKeyOrder at the latest when its claim of
// three heads of one partition takes them all. The concurrent rate
// properties fail when a window of the period holds Max + 1 starts, which
// their claimers reach as soon as the window has room (every row of the
// limit is due, and a claim fills what room it finds); the others at
// their first claim past the limit.
func TestLimitSelfTest(t *testing.T) {
	if os.Getenv(envLimitTarget) == "plus-one" {
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t), NewStore: newLimitPlusOne})
		return
	}
	runSelfTest(t, "TestLimitSelfTest", "plus-one", "a limit of Max + 1", limitResults)
}

// runSelfTest runs the properties of results in a child process of test,
// against the broken store target names (what, for messages), and fails
// unless each gives its result.
func runSelfTest(t *testing.T, test, target, what string, want map[string]string) {
	t.Helper()
	names := slices.Sorted(maps.Keys(want))
	results, out, err := runChild(t, test, names, envLimitTarget+"="+target)
	var table strings.Builder
	failed := false
	for _, name := range names {
		fmt.Fprintf(&table, "%-52s %s\n", name, results[name])
		if results[name] != want[name] {
			t.Errorf("%s against %s: %s, want %s", name, what, results[name], want[name])
			failed = true
		}
	}
	t.Logf("the properties against %s:\n%s", what, table.String())
	if failed {
		t.Logf("the child's output:\n%s", out)
	}
	if err == nil {
		t.Errorf("the suite against %s exited with success, want failure", what)
	}
}

// rateHalfWindow is the real store with every rate limit's window half
// its period: SetRateLimit declares Per / 2, so that twice Max start in
// some window of Per.
type rateHalfWindow struct{ *lease.Store }

var _ conformance.Store = rateHalfWindow{}

func (s rateHalfWindow) SetRateLimit(ctx context.Context, l lease.RateLimit, by string) (lease.RateLimit, bool, error) {
	l.Per /= 2
	return s.Store.SetRateLimit(ctx, l, by)
}

func newRateHalfWindow(db *sql.DB, drv leasework.Driver, opts lease.Options) (conformance.Store, error) {
	s, err := lease.New(db, drv, opts)
	if err != nil {
		return nil, err
	}
	return rateHalfWindow{s}, nil
}

// rateWindowResults are the results the rate properties must give on a
// store whose windows are half their period, and a control.
var rateWindowResults = map[string]string{
	"RateLimitHoldsInEveryWindowUnderConcurrentClaims": "FAIL",
	"HeldBackRowsRunOnceTheWindowMovesOn":              "FAIL",
	"RateLimitComposesWithKeyOrder":                    "FAIL",
	"RetriesAndTakeBacksTakeStarts":                    "FAIL",
	"PartitionRateLimitHoldsInEveryWindow":             "FAIL",

	"ClaimThenComplete": "PASS",
}

// TestRateWindowSelfTest proves the rate properties can fail another way:
// in a child process, against a store whose every rate limit counts its
// starts over half its period (rateHalfWindow), each of them fails, and a
// control passes. The concurrent ones when a window of the period holds
// more than Max starts (up to twice as many start in it); the others when
// a claim half a period on, the fixture having aged the starts by that
// much, takes a row.
func TestRateWindowSelfTest(t *testing.T) {
	if os.Getenv(envLimitTarget) == "half-window" {
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t), NewStore: newRateHalfWindow})
		return
	}
	runSelfTest(t, "TestRateWindowSelfTest", "half-window", "rate limits whose windows are half their period", rateWindowResults)
}
