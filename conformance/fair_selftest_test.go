package conformance_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// fairBlind is the real store with fair scheduling blind two ways: a
// partition's own weight is never set (every partition weighs the
// default), and a queue made fair has its insert trigger disabled (notify,
// which writes the arrivals of the partitions inserted, and wakes
// listeners, which the properties do not wait for), so that a partition
// that comes is known to its claims only once its rows reach the head of
// the queue's order.
type fairBlind struct{ *lease.Store }

var _ conformance.Store = fairBlind{}

func (s fairBlind) SetWeight(ctx context.Context, w lease.Weight, by string) (int, error) {
	if w.Partition != "" {
		return 0, nil
	}
	old, err := s.Store.SetWeight(ctx, w, by)
	if err != nil {
		return old, err
	}
	_, err = s.DB().ExecContext(ctx, `ALTER TABLE `+s.QualifiedTable()+` DISABLE TRIGGER `+lease.QuoteIdent(s.Table()+"_notify"))
	return old, err
}

func newFairBlind(db *sql.DB, drv leasework.Driver, opts lease.Options) (conformance.Store, error) {
	s, err := lease.New(db, drv, opts)
	if err != nil {
		return nil, err
	}
	return fairBlind{s}, nil
}

// fairResults are the results the fairness properties must give on a
// store blind to weights and to partitions that come, and a control.
var fairResults = map[string]string{
	"FairClaimsSplitByWeightUnderConcurrentClaims":           "FAIL",
	"IdlePartitionsShareIsUsedAndItsReturnWaitsForNoBacklog": "FAIL",

	"ClaimThenComplete": "PASS",
}

// TestFairSelfTest proves the fairness properties can fail: in a child
// process, against a store that sets no partition's own weight and
// learns of no partition at its enqueue (fairBlind), each of them fails,
// and a control passes. The split comes out 1 : 1; the partition that
// comes waits behind the backlog, which the queue's order puts first.
func TestFairSelfTest(t *testing.T) {
	if os.Getenv(envLimitTarget) == "fair-blind" {
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t), NewStore: newFairBlind})
		return
	}
	runSelfTest(t, "TestFairSelfTest", "fair-blind", "a store blind to weights and to partitions that come", fairResults)
}
