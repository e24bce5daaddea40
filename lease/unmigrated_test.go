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
// carries the server's SQLSTATE.
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
		for _, s := range []*lease.Store{noSchema, noTable} {
			_, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
			if err == nil {
				t.Fatalf("claim on %s succeeded", s.QualifiedTable())
			}
			for _, want := range []string{s.QualifiedTable() + " does not exist", "is the table migrated? run `leasework migrate` or Store.Migrate"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("claim on %s: %v\nwant it to say %q", s.QualifiedTable(), err, want)
				}
			}
			if code := drv.SQLState(err); code != "42P01" && code != "3F000" {
				t.Errorf("claim on %s: SQLSTATE %q, want 42P01 or 3F000 kept", s.QualifiedTable(), code)
			}
		}
	})
}
