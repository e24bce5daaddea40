package lease_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// TestPassingKeysOnCostsTheBatchNotTheBacklog: a batch of completions that
// passes its keys on (settle_keys, migration 13) reads a number of buffers
// that grows with the batch, not with the events waiting behind its keys.
// A batch of 200 keyed completions is explained (and rolled back) over
// keys with 1 event waiting each and over keys with 59 waiting each, with
// custom and generic plans (plan_cache_mode reaches the function's own
// statements too): the two read within a quarter of each other (they read
// the same, give or take a few buffers). A promotion that found its rows
// through the index of every waiting row, with "has the key a live row?"
// as a NOT EXISTS the planner may join with every live row, read 1.4
// times as much here under a generic plan; on an unanalyzed table of
// 20,000 rows it read the index entries of every WAITING row (17,500) to
// promote 500.
func TestPassingKeysOnCostsTheBatchNotTheBacklog(t *testing.T) {
	const keys = 200
	drv := pgtest.Drivers[0].New()
	buffers := map[string]map[int]int{}
	for _, behind := range []int{1, 59} {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		for range behind + 1 {
			events := make([]lease.Event, keys)
			for k := range events {
				events[k] = lease.Event{Kind: "k", Key: fmt.Sprintf("key-%d", k)}
			}
			pgtest.Enqueue(t, s, events...)
		}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 2 * keys, Lease: time.Hour})
		if err != nil || len(claims) != keys {
			t.Fatalf("claim: %d claims, %v; want one per key, %d", len(claims), err, keys)
		}
		var ids, gens []string
		for _, c := range claims {
			ids = append(ids, fmt.Sprint(c.ID))
			gens = append(gens, fmt.Sprintf(`"%d":[%d]`, c.ID, c.Generation))
		}
		args := "'{" + strings.Join(ids, ",") + "}', '{" + strings.Join(gens, ",") + "}'"
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			conn, err := s.DB().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Twice: the first look at a key skips, from then on, the
			// index entries its enqueue left dead (a keyed row is
			// inserted READY, and waits from its commit on); this test is
			// about the rows alive. The table is neither vacuumed nor
			// analyzed, as a busy one often is not.
			explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF", mode, lease.GuardedWrites(s)["complete"], args)
			plan := explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF", mode, lease.GuardedWrites(s)["complete"], args)
			conn.Close()
			n, ok := passedBuffers(plan)
			if !ok {
				t.Fatalf("%s: no buffers for the CTE passed in the plan:\n%s", mode, shortLines(plan))
			}
			if buffers[mode] == nil {
				buffers[mode] = map[int]int{}
			}
			buffers[mode][behind] = n
		}
	}
	for mode, b := range buffers {
		t.Logf("%s: passing %d keys on reads %d buffers with 1 event waiting per key, %d with 59", mode, keys, b[1], b[59])
		if 4*b[59] > 5*b[1] {
			t.Errorf("%s: passing %d keys on reads %d buffers with 59 events waiting per key, %d with 1: its cost grows with the backlog", mode, keys, b[59], b[1])
		}
	}
}

var cteBuffers = regexp.MustCompile(`(?s)CTE passed\n.*?Buffers: shared hit=(\d+)(?: read=(\d+))?`)

// passedBuffers returns the buffers (hit and read) the CTE passed of a
// completion's plan reads: the function settle_keys, whose statements
// EXPLAIN counts in the node that calls it.
func passedBuffers(plan string) (int, bool) {
	m := cteBuffers.FindStringSubmatch(plan)
	if m == nil {
		return 0, false
	}
	hit, _ := strconv.Atoi(m[1])
	read, _ := strconv.Atoi(m[2])
	return hit + read, true
}
