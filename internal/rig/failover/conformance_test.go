package failover

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/leasework/leasework/conformance"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// envPromotedPort names, to the suite's child processes (the kill tests
// re-execute this test binary, narrowed to their subtest), the port of the
// promoted standby the parent runs the suite against. A child finds it set
// and goes straight to conformance.Run, which connects the child to the
// parent's server and schema: it must not build a pair of its own, which
// its SIGKILL would leave running.
const envPromotedPort = "LEASEWORK_FAILOVER_CONFORMANCE_PORT"

// The conformance suite holds on a server that was promoted: there every
// generation is at least the floor of the new timeline, 2^32 on timeline
// 2, and the suite's expectations follow the floor of the server it runs
// on. Third parties run the suite against managed databases that have
// failed over; a promoted standby is such a server. The whole suite runs
// there, kill tests included, through one driver: the floor is the SQL's,
// the same whichever driver sends it, and each driver's package runs the
// suite on an ordinary server (it was run through both here, for a third
// of this package's CPU and nothing more found).
func TestConformanceOnPromotedStandby(t *testing.T) {
	port := os.Getenv(envPromotedPort)
	if port == "" {
		ctx := context.Background()
		p := newPair(t, false)
		old := p.primary
		p.promote(t)
		if err := old.Stop(); err != nil {
			t.Fatalf("stop the old primary: %v", err)
		}
		db, err := sql.Open("pgx", p.primary.DSN())
		must(t, "open a pool on the promoted standby", err)
		defer db.Close()
		var floor int64
		query(t, db, timelineFloorSQL, nil, &floor)
		if floor != 1<<32 {
			t.Fatalf("generation floor of the promoted standby = %d; want %d (timeline 2)", floor, int64(1)<<32)
		}
		var inRecovery bool
		if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			t.Fatalf("promoted standby: in recovery %v (%v); want a primary", inRecovery, err)
		}
		port = strconv.Itoa(p.primary.Port())
		// Not t.Setenv, which the suite's parallel subtests refuse. No
		// other test reads this variable.
		os.Setenv(envPromotedPort, port)
		t.Cleanup(func() { os.Unsetenv(envPromotedPort) })
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("$%s = %q: %v", envPromotedPort, port, err)
	}
	d := pgtest.Drivers[0]
	t.Run(d.Name, func(t *testing.T) {
		drv := d.New()
		conformance.Run(t, conformance.Target{Driver: drv, DSN: dsnPorts(drv, fmt.Sprintf("conformance-%s", d.Name), n)})
	})
}
