package failover

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// pair is a primary and its streaming-replication standby.
type pair struct {
	primary, standby *pgserver.Server
}

// newPair starts a primary and a standby of it. With sync, commits on the
// primary wait until the standby has flushed them (synchronous_commit on,
// synchronous_standby_names '*'); without, the standby may lag.
func newPair(t *testing.T, sync bool) *pair {
	t.Helper()
	ctx := context.Background()
	// Commits must really wait for the standby; fsync stays off, as the
	// processes die in these tests, never the machine.
	opts := pgserver.Options{Settings: []string{"synchronous_commit=on"}}
	primary, err := pgserver.StartWith(ctx, opts)
	must(t, "start the primary", err)
	t.Cleanup(func() { primary.Stop() })
	p := &pair{primary: primary}
	p.addStandby(t, sync)
	return p
}

// addStandby makes a new standby of the current primary.
func (p *pair) addStandby(t *testing.T, sync bool) {
	t.Helper()
	ctx := context.Background()
	standby, err := pgserver.StartStandby(ctx, p.primary, pgserver.Options{Settings: []string{"synchronous_commit=on"}})
	must(t, "start a standby", err)
	t.Cleanup(func() { standby.Stop() })
	names := ""
	if sync {
		names = "*"
	}
	must(t, "make the standby synchronous", p.primary.RequireSyncStandby(ctx, names))
	p.standby = standby
}

// promote makes the standby the primary.
func (p *pair) promote(t *testing.T) {
	t.Helper()
	must(t, "promote the standby", p.standby.Promote(context.Background()))
	p.primary, p.standby = p.standby, nil
}

// dsn is a multi-host connection string, in drv's dialect, naming servers,
// that connects only to the one accepting writes, as application app.
func dsn(drv leasework.Driver, app string, servers ...*pgserver.Server) string {
	var ports []int
	for _, s := range servers {
		ports = append(ports, s.Port())
	}
	return dsnPorts(drv, app, ports...)
}

// dsnPorts is [dsn] for servers listening on ports of 127.0.0.1.
func dsnPorts(drv leasework.Driver, app string, portNumbers ...int) string {
	var hosts, ports []string
	for _, p := range portNumbers {
		hosts = append(hosts, "127.0.0.1")
		ports = append(ports, fmt.Sprint(p))
	}
	if drv.Name() == "pq" {
		// lib/pq reads several hosts only in this form (or as host= and
		// port= URL parameters), not as URL hosts h1:p1,h2:p2.
		return fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable connect_timeout=%d target_session_attrs=read-write application_name=%s",
			strings.Join(hosts, ","), strings.Join(ports, ","), int(connectTimeout.Seconds()), app)
	}
	var addrs []string
	for i := range hosts {
		addrs = append(addrs, hosts[i]+":"+ports[i])
	}
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=%d&target_session_attrs=read-write&application_name=%s",
		strings.Join(addrs, ","), int(connectTimeout.Seconds()), url.QueryEscape(app))
}

// openStore opens a store on dsn through drv, in schema, and migrates it
// when migrate is set.
func openStore(t *testing.T, drv leasework.Driver, dsn, schema string, migrate bool) *lease.Store {
	t.Helper()
	db, err := drv.Open(dsn)
	must(t, "open a pool", err)
	db.SetMaxIdleConns(8) // database/sql keeps 2: a connection set up again for nearly every statement
	t.Cleanup(func() { db.Close() })
	s, err := lease.New(db, drv, lease.Options{Schema: schema})
	must(t, "open a store", err)
	if migrate {
		must(t, "migrate", retryConn(t, drv, "migrate", func() error {
			_, err := s.Migrate(context.Background())
			return err
		}))
	}
	return s
}

// connectTimeout is the connect_timeout of the tests' connection strings:
// a liveness bound on one connection attempt to one server, generous for a
// loaded machine where a server that is starting up or recovering takes
// seconds to answer. A server that is down refuses at once; this bounds
// only a slow one.
const connectTimeout = 10 * time.Second

// retryBound is how long retryConn keeps trying: a liveness bound for a
// loaded machine, not a measure of recovery (the tests log those).
const retryBound = 3 * time.Minute

// retryConn runs f until it returns an error that is not a lost
// connection, for at most retryBound: a pool keeps connections to the old
// primary until it uses them, and a promoted standby may still refuse
// connections while it starts. An error it returns names what.
func retryConn(t *testing.T, drv leasework.Driver, what string, f func() error) error {
	t.Helper()
	return retryWhile(func(err error) bool { return leasework.Classify(drv, err) == leasework.ClassConnection }, what, f)
}

// retryWhile is [retryConn] with lost telling a lost connection.
func retryWhile(lost func(error) bool, what string, f func() error) error {
	deadline := time.Now().Add(retryBound)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !lost(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still failing to connect after %v: %w", what, retryBound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// must fails the test with err, naming the step that failed.
func must(t *testing.T, step string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// connLostAnyDriver reports whether err is a lost connection to either
// driver: for a pool whose driver the caller does not know.
func connLostAnyDriver(err error) bool {
	for _, d := range pgtest.Drivers {
		if leasework.Classify(d.New(), err) == leasework.ClassConnection {
			return true
		}
	}
	return false
}

// query scans one row of q on db, trying again while the connection
// fails (db's pool may hold connections to a server that is gone).
func query(t *testing.T, db *sql.DB, q string, args []any, dest ...any) {
	t.Helper()
	err := retryWhile(connLostAnyDriver, q, func() error {
		return db.QueryRowContext(context.Background(), q, args...).Scan(dest...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs the workers' debug lines with -v, nothing otherwise.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// servers lists p's servers, primary first.
func (p *pair) servers() []*pgserver.Server { return []*pgserver.Server{p.primary, p.standby} }
