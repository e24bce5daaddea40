package conformance_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// envBroken makes TestBrokenDrivers run the suite itself, in a child
// process, against the driver of the case it names.
const envBroken = "LEASEWORK_BROKEN_DRIVER"

// A brokenCase is a real driver with one required method of
// leasework.Driver made wrong, and the results the suite must give it on
// the properties that check that method (and on a control property that
// must still pass). A case with no broken method is a control: the
// properties pass on its driver.
type brokenCase struct {
	name   string // of the case, a subtest's name
	broken string // the method made wrong, for the table; "" for a control
	driver func() leasework.Driver
	// bound is the child's dead-connection bound (conformance's
	// deadConnBound); 0 keeps the suite's own. Shortened only for a driver
	// that waits forever, whose failure it brings sooner.
	bound time.Duration
	want  map[string]string // property: PASS, FAIL or SKIP
}

// brokenCases are the self-test's drivers. Each runs only the properties
// that name the method it breaks and a control, in a child process of its
// own: the whole suite against every one would cost minutes.
func brokenCases() []brokenCase {
	return []brokenCase{
		{
			name: "pgx", driver: func() leasework.Driver { return pgxdriver.New() },
			want: map[string]string{
				"DriverNameIsAShortWord":               "PASS",
				"DuplicateEventIsRejected":             "PASS",
				"ErrorsAreClassified":                  "PASS",
				"DeadConnStatementEndsWithItsDeadline": "PASS",
				"ClaimThenComplete":                    "PASS",
				"CopiedEnqueueKeepsEnqueuesPromises":   "SKIP", // pgx through database/sql has no COPY
			},
		},
		{
			name: "NameWithASlash", broken: "Name",
			driver: func() leasework.Driver { return slashName{wrap(pgxdriver.New())} },
			want: map[string]string{
				"DriverNameIsAShortWord": "FAIL",
				"ClaimThenComplete":      "PASS",
			},
		},
		{
			name: "NameEmpty", broken: "Name",
			driver: func() leasework.Driver { return emptyName{wrap(pgxdriver.New())} },
			want: map[string]string{
				"DriverNameIsAShortWord": "FAIL",
				"ClaimThenComplete":      "PASS",
			},
		},
		{
			// Also FIFOPerKeyUnderConcurrentClaimersAndEnqueuers, when an
			// enqueue races a batch of completions (SQLSTATE 55P03, which
			// the store then cannot tell): not every run, so not listed.
			name: "SQLStateAlwaysEmpty", broken: "SQLState",
			driver: func() leasework.Driver { return emptySQLState{wrap(pgxdriver.New())} },
			want: map[string]string{
				"DuplicateEventIsRejected": "FAIL",
				"ErrorsAreClassified":      "FAIL",
				"ClaimThenComplete":        "PASS",
			},
		},
		{
			name: "IsConnectionErrorAlwaysFalse", broken: "IsConnectionError",
			driver: func() leasework.Driver { return neverConnectionError{wrap(pgxdriver.New())} },
			want: map[string]string{
				"ErrorsAreClassified": "FAIL",
				// Classify finds the standard library's timeout errors
				// without the driver's help.
				"DeadConnStatementEndsWithItsDeadline": "PASS",
				"ClaimThenComplete":                    "PASS",
			},
		},
		{
			// The control of the next case: the same driver, whose Array
			// wraps. (Its Open is lib/pq's own pool, which fails the
			// dead-connection properties: none is run.)
			name: "SliceRefusingArrayWraps",
			driver: func() leasework.Driver {
				return refusesSlices{wrapped: wrap(pqdriver.New()), array: func(s any) any { return pq.Array(s) }}
			},
			want: map[string]string{
				"ClaimThenComplete":              "PASS",
				"EnqueueAccountsForEveryEvent":   "PASS",
				"BatchedOutcomesReportEachClaim": "PASS",
				"DriverNameIsAShortWord":         "PASS",
			},
		},
		{
			// Every property that claims, enqueues or writes a batch fails.
			name: "SliceRefusingArrayAsIs", broken: "Array",
			driver: func() leasework.Driver {
				return refusesSlices{wrapped: wrap(pqdriver.New()), array: func(s any) any { return s }}
			},
			want: map[string]string{
				"ClaimThenComplete":              "FAIL",
				"EnqueueAccountsForEveryEvent":   "FAIL",
				"BatchedOutcomesReportEachClaim": "FAIL",
				"DriverNameIsAShortWord":         "PASS",
			},
		},
		{
			name: "pq", driver: func() leasework.Driver { return pqdriver.New() },
			want: map[string]string{
				"DeadConnStatementEndsWithItsDeadline":  "PASS",
				"DeadConnHandshakeEndsWithTheContext":   "PASS",
				"DeadConnHandshakeEndsAtConnectTimeout": "PASS",
				"ClaimThenComplete":                     "PASS",
				"CopiedEnqueueKeepsEnqueuesPromises":    "PASS",
			},
		},
		{
			name: "CopierCountingEveryRow", broken: "Copier.CopyFrom",
			driver: func() leasework.Driver { return copierCountingEveryRow{wrap(pqdriver.New())} },
			want: map[string]string{
				"CopiedEnqueueKeepsEnqueuesPromises": "FAIL",
				"EnqueueAccountsForEveryEvent":       "PASS",
				"ClaimThenComplete":                  "PASS",
			},
		},
		{
			name: "CopierHidingSQLState", broken: "Copier.CopyFrom",
			driver: func() leasework.Driver { return copierHidingSQLState{wrap(pqdriver.New())} },
			want: map[string]string{
				"CopiedEnqueueKeepsEnqueuesPromises": "FAIL",
				"DuplicateEventIsRejected":           "PASS",
				"ClaimThenComplete":                  "PASS",
			},
		},
		{
			// The listener properties are skipped: driver/pq listens only
			// on a pool of its own Open.
			name: "OpenUnbounded", broken: "Open",
			driver: func() leasework.Driver { return unboundedOpen{wrap(pqdriver.New())} },
			bound:  5 * time.Second,
			want: map[string]string{
				"DeadConnStatementEndsWithItsDeadline":         "FAIL",
				"DeadConnRowsEndWithTheirDeadline":             "FAIL",
				"DeadConnTransactionEndsAndFreesItsConnection": "FAIL",
				"DeadConnHandshakeEndsWithTheContext":          "FAIL",
				// lib/pq bounds a set-up by connect_timeout itself.
				"DeadConnHandshakeEndsAtConnectTimeout": "PASS",
				"ClaimThenComplete":                     "PASS",
			},
		},
	}
}

// TestBrokenDrivers proves that every required method of leasework.Driver
// matters: for each, a driver that gets it wrong fails a property of the
// suite. Each case runs in a child process of its own, in parallel.
func TestBrokenDrivers(t *testing.T) {
	if name := os.Getenv(envBroken); name != "" {
		for _, c := range brokenCases() {
			if c.name == name {
				if c.bound > 0 {
					conformance.SetDeadConnBound(c.bound)
				}
				conformance.Run(t, conformance.Target{Driver: c.driver(), DSN: pgtest.DSN(t)})
				return
			}
		}
		t.Fatalf("%s=%s names no case", envBroken, name)
	}
	for _, c := range brokenCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			names := slices.Sorted(maps.Keys(c.want))
			// The child runs them all at once: the dead-connection ones
			// mostly wait.
			results, out, err := runChild(t, "TestBrokenDrivers", names, envBroken+"="+c.name,
				fmt.Sprintf("-test.parallel=%d", len(names)))
			var table strings.Builder
			for _, name := range names {
				fmt.Fprintf(&table, "%-46s %s\n", name, results[name])
			}
			what := "a control"
			if c.broken != "" {
				what = c.broken + " wrong"
			}
			t.Logf("%s (%s):\n%s", c.name, what, table.String())
			failed := false
			for _, name := range names {
				if results[name] != c.want[name] {
					t.Errorf("%s on %s: %s, want %s", name, c.name, results[name], c.want[name])
					failed = true
				}
			}
			if failed {
				t.Logf("the child's output:\n%s", out)
			}
			if wantFail := slices.Contains(slices.Collect(maps.Values(c.want)), "FAIL"); wantFail != (err != nil) {
				t.Errorf("the suite against %s exited with %v; want failure %v", c.name, err, wantFail)
			}
		})
	}
}

// wrapped is a real driver and its Listen, for a case to override one
// method of.
type wrapped struct {
	leasework.Driver
	leasework.Notifier
}

func wrap(drv interface {
	leasework.Driver
	leasework.Notifier
}) wrapped {
	return wrapped{drv, drv}
}

// slashName's Name would split a test name in two.
type slashName struct{ wrapped }

func (slashName) Name() string { return "pgx/v5" }

// emptyName names nothing.
type emptyName struct{ wrapped }

func (emptyName) Name() string { return "" }

// emptySQLState never finds a server error's SQLSTATE.
type emptySQLState struct{ wrapped }

func (emptySQLState) SQLState(error) string { return "" }

// neverConnectionError calls no error a lost connection.
type neverConnectionError struct{ wrapped }

func (neverConnectionError) IsConnectionError(error) bool { return false }

// copierCountingEveryRow is driver/pq's COPY reporting every row it was
// given as taken, whether the table took it or not.
type copierCountingEveryRow struct{ wrapped }

func (copierCountingEveryRow) CopyFrom(ctx context.Context, tx *sql.Tx, table, columns []string, rows [][]any) (int64, error) {
	_, err := pqdriver.New().CopyFrom(ctx, tx, table, columns, rows)
	return int64(len(rows)), err
}

// copierHidingSQLState is driver/pq's COPY whose errors are their text
// only: the SQLSTATE of a unique violation is lost.
type copierHidingSQLState struct{ wrapped }

func (copierHidingSQLState) CopyFrom(ctx context.Context, tx *sql.Tx, table, columns []string, rows [][]any) (int64, error) {
	n, err := pqdriver.New().CopyFrom(ctx, tx, table, columns, rows)
	if err != nil {
		err = errors.New(err.Error())
	}
	return n, err
}

// unboundedOpen opens lib/pq's own pool, without the bounds driver/pq
// puts on it: lib/pq waits for the server's answer to a cancel request,
// and for a connection's set-up past its context, forever.
type unboundedOpen struct{ wrapped }

func (unboundedOpen) Open(dsn string) (*sql.DB, error) { return sql.Open("postgres", dsn) }

// refusesSlices is lib/pq as a database/sql driver that binds no Go slice
// itself, so that its Array must wrap them: its connections hide lib/pq's
// CheckNamedValue (which binds slices as arrays), and database/sql's
// default converter refuses a []int64. Its Array is given.
type refusesSlices struct {
	wrapped
	array func(any) any
}

func (d refusesSlices) Array(slice any) any { return d.array(slice) }

func (refusesSlices) Open(dsn string) (*sql.DB, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(plainConnector{c}), nil
}

type plainConnector struct{ driver.Connector }

func (c plainConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return plainConn{dc}, nil
}

// plainConn is a lib/pq connection with every optional interface
// database/sql uses but driver.NamedValueChecker.
type plainConn struct{ driver.Conn }

func (c plainConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c plainConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c plainConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c plainConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c plainConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c plainConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c plainConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }
