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
// is given: SetLimit declares Max + 1. Everything else is the real
// store's, which it embeds. It lives in this package's tests.
type limitPlusOne struct{ *lease.Store }

var _ conformance.Store = limitPlusOne{}

func (s limitPlusOne) SetLimit(ctx context.Context, l lease.Limit, by string) (int, error) {
	l.Max++
	return s.Store.SetLimit(ctx, l, by)
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

	"ClaimThenComplete": "PASS",
}

// TestLimitSelfTest proves the limit properties can fail: in a child
// process, against a store whose every limit admits one attempt more than
// its Max (limitPlusOne), each of them fails, and a control passes. The
// single-claimer properties fail at their first claim past the limit;
// the concurrent ones when their reader or their claimers' tally sees
// Max + 1 live attempts, which eight (or four) claimers of batches of up
// to four (three) rows reach at once; PartitionLimitComposesWithKeyOrder
// at the latest when its claim of three heads of one partition takes
// them all.
func TestLimitSelfTest(t *testing.T) {
	if os.Getenv(envLimitTarget) == "plus-one" {
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t), NewStore: newLimitPlusOne})
		return
	}
	names := slices.Sorted(maps.Keys(limitResults))
	results, out, err := runChild(t, "TestLimitSelfTest", names, envLimitTarget+"=plus-one")
	var table strings.Builder
	failed := false
	for _, name := range names {
		fmt.Fprintf(&table, "%-52s %s\n", name, results[name])
		if results[name] != limitResults[name] {
			t.Errorf("%s against a limit of Max + 1: %s, want %s", name, results[name], limitResults[name])
			failed = true
		}
	}
	t.Logf("the limit properties against a limit of Max + 1:\n%s", table.String())
	if failed {
		t.Logf("the child's output:\n%s", out)
	}
	if err == nil {
		t.Error("the suite against a limit of Max + 1 exited with success, want failure")
	}
}
