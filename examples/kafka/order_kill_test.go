//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

const (
	roleOrderRelay = "order-relay-until-killed"
	envHeld        = "LEASEWORK_KAFKA_TEST_HELD" // the event id the child holds
)

// A relay process is killed with SIGKILL while it holds customer-1's first
// order, claimed and not yet published. Until then it publishes everything
// else it may: the other customers' orders, none of customer-1's, whose
// later orders wait behind the held head. Once the dead relay's leases
// expire (a fixture), a second relay claims the head under generation 2,
// publishes it, then customer-1's later orders in order. The first
// deliveries per customer are in order; the consumer applies each order
// once, in order.
func TestOrderPerKeyKilledRelay(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		if os.Getenv(envRole) == roleOrderRelay {
			orderRelayUntilKilled(t, drv)
			return
		}
		e := newEnv(t, drv)
		orders := e.placeOrders()
		held := orders[0]

		args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1", "-test.timeout=5m"}
		if *keyless {
			args = append(args, "-keyless")
		}
		cmd := exec.CommandContext(e.ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), envRole+"="+roleOrderRelay, envSchema+"="+e.store.Schema(),
			envBrokers+"="+strings.Join(e.brokers, ","), envHeld+"="+held.eventID())
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		defer cmd.Process.Kill() // only matters if the test fails before the kill

		var claimedID string
		var claimedGen int64
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "LEASEWORK-HOLDING event=%s generation=%d", &claimedID, &claimedGen); err == nil {
				break
			}
		}
		if claimedID == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child exited before it claimed %s (scan error %v)", held.eventID(), sc.Err())
		}
		go func() { // drain, so the child is never blocked on a full pipe
			for sc.Scan() {
			}
		}()
		if claimedID != held.eventID() || claimedGen != 1 {
			t.Fatalf("child holds %s generation %d; want %s generation 1", claimedID, claimedGen, held.eventID())
		}
		e.waitHeld(orders, held) // the child published all it could

		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL: %v", err)
		}
		err = cmd.Wait()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die of SIGKILL: %v (%v)", err, cmd.ProcessState)
		}
		t.Logf("child %d died of SIGKILL holding %s (%s #%d)", cmd.Process.Pid, held.eventID(), held.Customer, held.Seq)
		e.wantRow(held.eventID(), leasework.StatusInProgress, 1)

		if n, err := leasetest.ExpireWorkerLeases(e.ctx, e.store, "relay-a"); err != nil || n != 1 {
			t.Fatalf("expire the dead relay's leases: %d expired, %v; want 1", n, err)
		}
		w := e.worker("relay-b", e.orderRelay(), framework.Config{}, framework.RetryPolicy{})
		stop := e.start(w)
		e.waitAllDone(orders)
		stop()
		e.wantRow(held.eventID(), leasework.StatusDone, 2)
		if c := w.Counters(); c.Reclaimed != 1 {
			t.Errorf("second relay: reclaimed %d; want 1 (the dead relay's claim)", c.Reclaimed)
		}

		recs := e.records()
		if len(recs) != len(orders) {
			t.Fatalf("topic holds %d records; want %d (the dead relay published nothing of the held order)", len(recs), len(orders))
		}
		dups := e.wantFirstDeliveriesInOrder(orders, recs)
		if len(dups) != 0 {
			t.Errorf("duplicates on the topic: %+v; want none", dups)
		}
		e.wantAppliedInOrder(orders, len(recs), 0)
	})
}

// orderRelayUntilKilled is the child's side: a relay worker that publishes
// every event it claims but the held one, which it reports on stdout and
// never publishes.
func orderRelayUntilKilled(t *testing.T, drv leasework.Driver) {
	store, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: os.Getenv(envSchema)})
	if err != nil {
		t.Fatal(err)
	}
	e := attachEnv(t, store, splitBrokers(os.Getenv(envBrokers)))
	rl, held := e.orderRelay(), os.Getenv(envHeld)
	h := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if c.EventID == held {
			fmt.Printf("LEASEWORK-HOLDING event=%s generation=%d\n", c.EventID, c.Generation)
			os.Stdout.Sync()
			time.Sleep(10 * time.Minute) // until the parent's SIGKILL
		}
		return rl.Handle(ctx, c)
	})
	e.start(e.worker("relay-a", h, framework.Config{Concurrency: 4}, framework.RetryPolicy{}))
	time.Sleep(10 * time.Minute)
	t.Fatal("child was not killed")
}
