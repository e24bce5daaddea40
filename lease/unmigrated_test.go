package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestClaimOnAnUnmigratedTableNamesTheFix: a claim against a schema that
// does not exist, or a table that does not exist in an existing schema,
// fails with an error that names the table and how to create it, and still
// carries the server's SQLSTATE; in the caller's transaction too (ClaimTx),
// where the claim's first read must not leave the transaction aborted
// and the error a plain "current transaction is aborted".
func TestClaimOnAnUnmigratedTableNamesTheFix(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		migrated := pgtest.Store(t, drv, lease.Options{})
		noSchema, err := lease.New(migrated.DB(), drv, lease.Options{Schema: pgtest.SchemaName()})
		if err != nil {
			t.Fatal(err)
		}
		noTable, err := lease.New(migrated.DB(), drv, lease.Options{Schema: migrated.Schema(), Table: "missing"})
		if err != nil {
			t.Fatal(err)
		}
		claimTx := func(s *lease.Store) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			_, err = s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			return err
		}
		for _, c := range []struct {
			s   *lease.Store
			how string
		}{{noSchema, "Claim"}, {noTable, "Claim"}, {noSchema, "ClaimTx"}, {noTable, "ClaimTx"}} {
			s := c.s
			var err error
			if c.how == "ClaimTx" {
				err = claimTx(s)
			} else {
				_, err = s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			}
			if err == nil {
				t.Fatalf("%s on %s succeeded", c.how, s.QualifiedTable())
			}
			for _, want := range []string{s.QualifiedTable() + " does not exist", "is the table migrated? run `leasework migrate` or Store.Migrate"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s on %s: %v\nwant it to say %q", c.how, s.QualifiedTable(), err, want)
				}
			}
			if code := drv.SQLState(err); code != "42P01" && code != "3F000" {
				t.Errorf("%s on %s: SQLSTATE %q, want 42P01 or 3F000 kept", c.how, s.QualifiedTable(), code)
			}
		}
	})
}
