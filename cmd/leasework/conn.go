package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/lease"
)

// envDSN names the environment variable that gives the database when -dsn
// does not: the same one the tests and the examples read.
const envDSN = "LEASEWORK_DSN"

// connFlags are the flags every command takes: where the table is, and how
// to print.
type connFlags struct {
	dsn     string
	driver  string
	schema  string
	table   string
	json    bool
	timeout time.Duration
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "dsn", "", "PostgreSQL URL or key=value `string` (default $"+envDSN+")")
	fs.StringVar(&f.driver, "driver", "pgx", "database/sql driver: pgx or pq")
	fs.StringVar(&f.schema, "schema", lease.DefaultSchema, "`schema` of the events table (lower case)")
	fs.StringVar(&f.table, "table", lease.DefaultTable, "events `table` (lower case)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long (0: never)")
}

// leaseDriver returns the named driver, or a usage error.
func (f *connFlags) leaseDriver() (leasework.Driver, error) {
	switch f.driver {
	case "pgx":
		return pgxdriver.New(), nil
	case "pq":
		return pqdriver.New(), nil
	}
	return nil, usagef("-driver %q is not a driver; use pgx or pq", f.driver)
}

// open checks the flags and opens a store. Bad flag values are usage
// errors; nothing is sent to the server here (the first statement connects).
func (f *connFlags) open(getenv func(string) string) (*lease.Store, error) {
	drv, err := f.leaseDriver()
	if err != nil {
		return nil, err
	}
	if f.timeout < 0 {
		return nil, usagef("-timeout is %v; it must not be negative", f.timeout)
	}
	dsn := strings.TrimSpace(f.dsn)
	if dsn == "" {
		dsn = strings.TrimSpace(getenv(envDSN))
	}
	if dsn == "" {
		return nil, usagef("no database given: pass -dsn or set $%s (leasework never starts a server of its own)", envDSN)
	}
	// lib/pq parses the DSN in Open; pgx's database/sql connector only when
	// it first connects. Parse it here too, so that a malformed DSN is a
	// usage error whichever the driver.
	if f.driver == "pgx" {
		if _, err := pgx.ParseConfig(dsn); err != nil {
			return nil, usagef("bad -dsn or $%s: %v", envDSN, err)
		}
	}
	db, err := drv.Open(dsn)
	if err != nil {
		return nil, usagef("bad -dsn or $%s: %v", envDSN, err)
	}
	st, err := lease.New(db, drv, lease.Options{Schema: f.schema, Table: f.table})
	if err != nil {
		db.Close()
		return nil, usagef("bad -schema or -table: %v", err)
	}
	return st, nil
}

// SQLSTATE codes of a table or schema that does not exist.
const (
	sqlStateUndefinedTable = "42P01"
	sqlStateInvalidSchema  = "3F000"
)

// explain adds a hint to errors an operator can act on.
func explain(st *lease.Store, err error, timeout time.Duration) error {
	switch st.Driver().SQLState(err) {
	case sqlStateUndefinedTable, sqlStateInvalidSchema:
		return fmt.Errorf("%w\n(to migrate this table: leasework migrate -schema %s -table %s)",
			err, st.Schema(), st.Table())
	}
	if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		return fmt.Errorf("%w (gave up after -timeout %v)", err, timeout)
	}
	return err
}
