//go:build linux

package framework_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// txClaim is what a tx child says it claimed.
type txClaim struct {
	eventID string
	id, gen int64
}

func expectTxClaims(t *testing.T, c *child, n int) []txClaim {
	t.Helper()
	var got []txClaim
	for range n {
		var cl txClaim
		if _, err := fmt.Sscan(c.expect(t, "claimed "), &cl.eventID, &cl.id, &cl.gen); err != nil {
			t.Fatal(err)
		}
		got = append(got, cl)
	}
	return got
}

// faultRun is what killedThenPaused saw: the claims of the two worker
// processes and the counters of the paused one and of the live worker.
type faultRun struct {
	claimedA, claimedB []txClaim
	paused, live       framework.Counters
}

// killedThenPaused is the fault sequence of the exactly-once tests. Worker
// process A claims two rows, writes their effects in its open transactions
// and is killed with SIGKILL (its transactions die with its connections);
// their leases are expired by the fixture. Worker process B claims two rows
// and is stopped with SIGSTOP; their leases are expired. A live worker
// running handle then completes every row of ids, and B resumes, late.
// checkpoint, when not nil, runs after each step with the step's claims:
// "A claimed", "A killed", "B claimed", "B paused".
func killedThenPaused(t *testing.T, s *lease.Store, ids []lease.Enqueued, handle framework.TxFunc, checkpoint func(step string, claimed []txClaim)) faultRun {
	t.Helper()
	ctx := context.Background()
	var run faultRun
	step := func(name string, claimed []txClaim) {
		if checkpoint != nil {
			checkpoint(name, claimed)
		}
	}
	expire := func(claimed []txClaim) {
		for _, cl := range claimed {
			if err := leasetest.ExpireLease(ctx, s, cl.id); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A: killed with its transactions open.
	a := startChild(t, "tx", s)
	run.claimedA = expectTxClaims(t, a, 2)
	step("A claimed", run.claimedA)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := a.cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child A: %v; want death by SIGKILL", err)
	}
	expire(run.claimedA)
	step("A killed", run.claimedA)

	// B: claims, then is paused past its lease.
	b := startChild(t, "tx", s)
	run.claimedB = expectTxClaims(t, b, 2)
	step("B claimed", run.claimedB)
	pid := b.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	expire(run.claimedB)
	step("B paused", run.claimedB)

	// A live worker handles everything while B is stopped.
	w := newWorker(t, s, framework.Config{Concurrency: 4, PollInterval: 20 * time.Millisecond})
	registerTx(t, w, "tx", framework.RetryPolicy{}, handle)
	stop := start(t, w)
	for _, e := range ids {
		waitRow(t, s, e.ID, "the event to complete", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
	}
	stop()
	run.live = w.Counters()

	// B resumes, late.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(b.stdin, "resume")
	if err := json.Unmarshal([]byte(b.expect(t, "result ")), &run.paused); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("child B: %v", err)
	}
	return run
}

// Transactional handlers apply each event's effect exactly once within the
// database, across a killed owner, a paused owner that resumes after its
// claims were taken over, and the reclaims. Six events: worker process A
// claims two, writes their effects in its open transactions and is killed
// with SIGKILL (its transactions die with its connections); their leases
// are expired by the fixture. Worker process B reclaims them, writes their
// effects and is stopped with SIGSTOP; its leases are expired. A live worker
// then handles all six, B's two included. B resumes: its completions are
// rejected and its effects rolled back. At the end every event is DONE and
// has exactly one effect, written by the generation that completed it.
func TestTransactionalEffectsExactlyOnceAcrossKillAndPause(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	table := effectsTable(t, s)
	ctx := context.Background()
	const n = 6
	var events []lease.Event
	for i := range n {
		events = append(events, lease.Event{Kind: "tx", EventID: fmt.Sprintf("effect-%d", i)})
	}
	ids := pgtest.Enqueue(t, s, events...)

	var claimedA []txClaim
	run := killedThenPaused(t, s, ids, func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		return insertEffect(ctx, tx, table, c)
	}, func(step string, claimed []txClaim) {
		switch step {
		case "A claimed":
			claimedA = claimed
		case "B claimed": // A's rows again
			for _, cl := range claimed {
				if cl.gen != 2 {
					t.Fatalf("child B claimed %+v; want A's rows again, at generation 2 (A claimed %+v)", cl, claimedA)
				}
			}
		}
	})
	kb, kw := run.paused, run.live
	t.Logf("paused worker's counters %+v; live worker's %+v", kb, kw)
	if kb.StaleRejections != 2 || kb.LeasesLost != 2 || kb.Completed != 0 || kb.Retried != 0 || kb.Failed != 0 {
		t.Errorf("paused worker: counters %+v; want both completions rejected (2 stale rejections, 2 leases lost), nothing written", kb)
	}
	if kw.Completed != n || kw.Reclaimed != 2 || kw.StaleRejections != 0 || kw.LeasesLost != 0 {
		t.Errorf("live worker: counters %+v; want %d completed, 2 reclaimed, nothing stale", kw, n)
	}

	// Exactly one effect per event, by the generation that completed it.
	rows, err := s.DB().QueryContext(ctx, "SELECT event_id, generation FROM "+table+" ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	effects := map[string][]int64{}
	for rows.Next() {
		var id string
		var gen int64
		if err := rows.Scan(&id, &gen); err != nil {
			t.Fatal(err)
		}
		effects[id] = append(effects[id], gen)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, e := range ids {
		r, err := s.Get(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := effects[e.EventID]; len(got) != 1 || got[0] != r.Generation || r.Status != leasework.StatusDone {
			t.Errorf("event %s: effects by generations %v, row %s at generation %d; want exactly one effect, by the completing generation",
				e.EventID, got, r.Status, r.Generation)
		}
	}
	for _, cl := range run.claimedA {
		if r, _ := s.Get(ctx, cl.id); r.Generation != 3 {
			t.Errorf("event %s: completed at generation %d; want 3 (killed at 1, paused at 2)", cl.eventID, r.Generation)
		}
	}
}
