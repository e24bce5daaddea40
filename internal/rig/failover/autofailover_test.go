//go:build autofailover

package failover

import (
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// Events flow through a pgx worker and a pq worker while a pg_auto_failover
// cluster (a monitor, a primary and a synchronous secondary) fails over
// twice: the primary crashes (every process of its node killed) and the
// monitor promotes the secondary; the old primary's keeper is started
// again and rejoins as the secondary (pg_rewind); then a planned failover
// (pg_autoctl perform failover) makes it the primary again. No
// acknowledged event is lost, no stale write is accepted, and the workers
// carry on by themselves on each new primary. Each failover starts with
// commits synchronous. It is built only with the autofailover build tag:
// go test -tags autofailover -run AutoFailover ./internal/rig/failover/ (which
// .ci/run does when $LEASEWORK_PG_AUTO_FAILOVER is set).
func TestFailoverOnPgAutoFailover(t *testing.T) {
	autoctl, bin := autoFailoverPrerequisites(t)
	start := time.Now()
	c := newAutoCluster(t, autoctl, bin)
	c.startMonitor(t)
	node1 := c.addNode(t, "node1", nil)
	node2 := c.addNode(t, "node2", node1)
	names := c.requireSync(t, node1)
	t.Logf("cluster built in %v: monitor on port %d, node1 primary on %d, node2 secondary on %d; synchronous_standby_names = %s",
		time.Since(start).Round(time.Millisecond), c.monitor.port, node1.port, node2.port, names)

	var writable, rejoined []time.Duration
	crash := func(t *testing.T) {
		start := time.Now()
		killed := c.crash(t, node1)
		c.waitWritable(t, node2)
		writable = append(writable, time.Since(start))
		t.Logf("node1 crashed: %d processes killed; node2 accepts writes %v later", killed, writable[0].Round(time.Millisecond))
		// Alone, node2 commits without waiting for a standby (wait_primary)
		// until node1 is back: pg_auto_failover keeps a formation of two
		// nodes writable when it loses one, and a crash of node2 meanwhile
		// would lose what it acknowledged.
		c.waitStates(t, map[string]string{"node2": "wait_primary"})

		// The old primary's keeper, started again, rewinds its data and
		// follows the new primary, which then commits synchronously again.
		start = time.Now()
		c.startKeeper(t, node1, "run", "--pgdata", node1.pgdata())
		c.waitSecondary(t, node1, node2)
		c.requireSync(t, node2)
		rejoined = append(rejoined, time.Since(start))
	}
	planned := func(t *testing.T) {
		start := time.Now()
		wait := c.performFailover(t)
		c.waitWritable(t, node1)
		writable = append(writable, time.Since(start))
		wait()
		c.waitStates(t, map[string]string{"node1": "primary", "node2": "secondary"})
		c.requireSync(t, node1)
		rejoined = append(rejoined, time.Since(start))
	}
	res := loadRun{
		dsn:       func(drv leasework.Driver, app string) string { return dsnPorts(drv, app, node1.port, node2.port) },
		events:    3000,
		failovers: []func(t *testing.T){crash, planned},
	}.run(t)
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("pg_auto_failover, synchronous: %v", res)
	t.Logf("crash of node1: node2 writable after %v, first claim on it after %v; node1's keeper started again, node1 a synchronous secondary after %v",
		ms(writable[0]), ms(res.recovery[0]), ms(rejoined[0]))
	t.Logf("planned failover to node1: node1 writable after %v, first claim on it after %v; node2 a synchronous secondary %v after it started",
		ms(writable[1]), ms(res.recovery[1]), ms(rejoined[1]))
	for name, c := range res.counters {
		t.Logf("%s: %+v", name, c)
	}
}
