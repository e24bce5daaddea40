//go:build linux

package framework_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The exactly-once test with keyed events: two keys of three events each,
// so that only the two heads can be claimed. Worker process A claims both
// heads, writes their effects in its open transactions and is killed; B
// claims them again and is paused past its lease. Throughout, the
// followers wait: neither the kill, nor the expiries, nor the reclaims
// release a key. A live worker then handles all six, each key in order;
// B resumes and its completions are rejected, its effects rolled back, and
// no key is released twice. Each event has exactly one effect, by the
// generation that completed it, in its key's order.
func TestTransactionalKeyedOrderAcrossKillAndPause(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	table := effectsTable(t, s)
	execSQL(t, s, "ALTER TABLE "+table+" ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY")
	ctx := context.Background()
	var events []lease.Event
	for i := range 3 {
		for k := range 2 {
			events = append(events, lease.Event{Kind: "tx", Key: fmt.Sprintf("key-%d", k), EventID: fmt.Sprintf("key-%d-%d", k, i)})
		}
	}
	ids := pgtest.Enqueue(t, s, events...)
	followersWait := func(when string) {
		t.Helper()
		var waiting int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+s.QualifiedTable()+" WHERE status = 'WAITING'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting != 4 {
			t.Fatalf("%s: %d rows WAITING; want the four followers", when, waiting)
		}
	}
	heads := func(claimed []txClaim) {
		t.Helper()
		for _, cl := range claimed {
			if cl.eventID != "key-0-0" && cl.eventID != "key-1-0" {
				t.Fatalf("claimed %+v; want the two heads only", claimed)
			}
		}
	}

	var order oneAtATime
	run := killedThenPaused(t, s, ids, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		defer order.enter(c.Key)()
		return insertEffect(ctx, tx, table, c)
	}, func(step string, claimed []txClaim) {
		switch step {
		case "A claimed", "B claimed":
			heads(claimed)
		case "A killed":
			followersWait("after A was killed and its leases expired")
		case "B paused":
			followersWait("after B was paused and its leases expired")
		}
	})
	kb, kw := run.paused, run.live
	if kb.StaleRejections != 2 || kb.Completed != 0 {
		t.Errorf("paused worker: counters %+v; want both completions rejected, nothing written", kb)
	}
	if n := order.count(); n != 0 {
		t.Errorf("%d times a key's handler started while another of its events was being handled", n)
	}
	if kw.Completed != 6 || kw.Reclaimed != 2 || kw.StaleRejections != 0 {
		t.Errorf("live worker: counters %+v; want 6 completed, 2 reclaimed, nothing stale", kw)
	}

	rows, err := s.DB().QueryContext(ctx, "SELECT e.event_id, e.generation, o.generation FROM "+table+" AS e JOIN "+
		s.QualifiedTable()+" AS o USING (event_id) ORDER BY e.n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	next := map[string]int{}
	for rows.Next() {
		var id string
		var gen, rowGen int64
		if err := rows.Scan(&id, &gen, &rowGen); err != nil {
			t.Fatal(err)
		}
		var k, i int
		if _, err := fmt.Sscanf(id, "key-%d-%d", &k, &i); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint("key-", k)
		if i != next[key] || gen != rowGen {
			t.Errorf("effect of %s by generation %d (row at %d) when %s-%d was next; want each once, in order, by the completing generation",
				id, gen, rowGen, key, next[key])
		}
		next[key] = i + 1
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if next["key-0"] != 3 || next["key-1"] != 3 {
		t.Errorf("effects per key %v; want 3 each", next)
	}
	checkNoKeyStranded(t, s)
}
