package failover

import (
	"context"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgserver"
)

// Events flow through a pgx worker and a pq worker while a synchronous
// standby takes over twice: the primary crashes (every process of it
// killed), then the new primary is shut down for a planned switchover,
// each time with the old primary rejoining as the standby. No
// acknowledged event is lost, no stale write is accepted, and the workers
// carry on by themselves on each new primary.
func TestFailoverOnStreamingReplication(t *testing.T) {
	ctx := context.Background()
	p := newPair(t, true)
	servers := p.servers() // fixed ports, whichever is primary
	switchOver := func(stop func(*pgserver.Server) error) func(t *testing.T) {
		return func(t *testing.T) {
			old := p.primary
			must(t, "stop the primary", stop(old))
			p.promote(t)
			must(t, "rejoin the old primary as a standby", old.Rejoin(ctx, p.primary, pgserver.Options{Settings: []string{"synchronous_commit=on"}}))
			p.standby = old
			must(t, "make the rejoined standby synchronous", p.primary.RequireSyncStandby(ctx, "*"))
		}
	}
	res := loadRun{
		dsn:    func(drv leasework.Driver, app string) string { return dsn(drv, app, servers...) },
		events: 1000,
		failovers: []func(t *testing.T){
			switchOver((*pgserver.Server).Crash),
			switchOver((*pgserver.Server).Halt),
		},
	}.run(t)
	t.Logf("streaming replication, synchronous: %v", res)
	for name, c := range res.counters {
		t.Logf("%s: %+v", name, c)
	}
}
