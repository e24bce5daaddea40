package conformance_test

import (
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasework/leasework/conformance"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	mydriver "github.com/leasework/leasework/driver/pq" // stands in for a third party's driver
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters.
var _ = []any{driverConformance, conformanceThroughOwnPool}

// driverConformance is the body of a driver author's TestConformance
// (docs/drivers.md, "Conformance").
func driverConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: mydriver.New(), DSN: os.Getenv("LEASEWORK_DSN")})
}

// conformanceThroughOwnPool runs the suite through pools of the caller's
// own (docs/drivers.md, "Conformance").
func conformanceThroughOwnPool(t *testing.T, dsn string) {
	conformance.Run(t, conformance.Target{
		Driver: lwpgx.New(),
		DSN:    dsn,
		OpenDB: func(dsn string) (*sql.DB, error) {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["application_name"] = "conformance" // your own settings
			return stdlib.OpenDB(*cfg), nil
		},
	})
}
