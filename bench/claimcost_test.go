package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/leasework/leasework/lease"
)

// Both claims of the claimcost section take 100 rows, and the rollback
// leaves the table as it was: every measured claim sees the same table.
func TestClaimCostLeavesTheTableUnchanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := &env{dsn: testDSN(t), log: io.Discard, logf: func(string, ...any) {}}
	s, err := openLeaseStore(ctx, e, "pgx", freshSchema("claimcost_test"))
	if err != nil {
		t.Fatal(err)
	}
	defer dropLeaseStore(s)
	if err := growFinished(ctx, e, s, 0, 1000); err != nil {
		t.Fatal(err)
	}
	if err := refillReady(ctx, s); err != nil {
		t.Fatal(err)
	}
	claims := map[string]func(*sql.Tx) (int, error){
		"leasework": func(tx *sql.Tx) (int, error) {
			cs, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: claimCostBatch, Lease: time.Minute})
			return len(cs), err
		},
		"single-OR": func(tx *sql.Tx) (int, error) {
			return countRows(tx.QueryContext(ctx, fmt.Sprintf(singleORClaimSQL, s.QualifiedTable()), claimCostBatch))
		},
	}
	for name, claim := range claims {
		if _, err := rolledBackClaim(ctx, s, claim); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ready, done, other int
		err := s.DB().QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE status = 'READY' AND generation = 0),
			count(*) FILTER (WHERE status = 'DONE'), count(*) FILTER (WHERE status NOT IN ('READY', 'DONE'))
			FROM `+s.QualifiedTable()).Scan(&ready, &done, &other)
		if err != nil {
			t.Fatal(err)
		}
		if ready != claimCostReady || done != 1000 || other != 0 {
			t.Errorf("after the %s claim: %d READY, %d DONE, %d other; want %d, 1000, 0", name, ready, done, other, claimCostReady)
		}
	}
}
