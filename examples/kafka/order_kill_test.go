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
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

const (
	roleOrderRelay = "order-relay-until-killed"
	envHeld        = "LEASEWORK_KAFKA_TEST_HELD" // the event id the child holds
)

// A relay process is killed with SIGKILL while it holds customer-1's first
// order: claimed and not yet published ("before publishing"), or published
// and acknowledged but not yet DONE ("after the ack"). Until then it
// publishes everything else it may: the other customers' orders, none of
// customer-1's later ones, which wait behind the held head. Once the dead
// relay's leases expire (a fixture), a second relay claims the head under
// generation 2, publishes it, then customer-1's later orders in order. The
// first deliveries per customer are in order; after the ack, the topic also
// holds the head's duplicate, generation 2, after its first copy and before
// customer-1's #2; the consumer applies each order once, in order.
//
// Without order per key (-keyless), both fail on the WAITING check and,
// "before publishing" always, on the topic: customer-1's #2-#4 are
// published before #1. "After the ack" fails on the topic when the child
// writes a later order's record before #1's, as the runs seen did
// ([2 1 3 4]).
func TestOrderPerKeyKilledRelay(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, afterAck := range []bool{false, true} {
			name := "before publishing"
			if afterAck {
				name = "after the ack"
			}
			t.Run(name, func(t *testing.T) {
				if os.Getenv(envRole) == roleOrderRelay {
					orderRelayUntilKilled(t, drv, afterAck)
					return
				}
				killedRelay(t, drv, afterAck)
			})
		}
	})
}

func killedRelay(t *testing.T, drv leasework.Driver, afterAck bool) {
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
	firstCopies := 0
	for _, r := range e.records() {
		if r.EventID == held.eventID() {
			firstCopies++
		}
	}
	if want := map[bool]int{false: 0, true: 1}[afterAck]; firstCopies != want {
		t.Fatalf("the topic holds %d records of %s before the kill; want %d", firstCopies, held.eventID(), want)
	}

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
	dups := e.wantFirstDeliveriesInOrder(orders, recs)
	if !afterAck {
		if len(recs) != len(orders) || len(dups) != 0 {
			t.Fatalf("topic holds %d records, duplicates %+v; want %d records, none (the dead relay published nothing of the held order)", len(recs), dups, len(orders))
		}
		e.wantAppliedInOrder(orders, len(recs), 0)
		return
	}
	if len(dups) != 1 || dups[0].EventID != held.eventID() || dups[0].Generation != 2 {
		t.Fatalf("duplicates on the topic: %+v; want %s generation 2", dups, held.eventID())
	}
	for _, r := range recs {
		if r.Partition == dups[0].Partition && r.EventID != held.eventID() && strings.HasPrefix(r.EventID, "order-c1-") && r.Offset < dups[0].Offset {
			t.Errorf("%s at offset %d, before the duplicate of #1 at offset %d; want the later orders after it", r.EventID, r.Offset, dups[0].Offset)
		}
	}
	t.Logf("duplicate: %s generation 2 at %s[%d]@%d, before customer-1's #2", held.eventID(), testTopic, dups[0].Partition, dups[0].Offset)
	e.wantAppliedInOrder(orders, len(recs), 1)
}

// orderRelayUntilKilled is the child's side: a relay worker that publishes
// every event it claims but the held one, which it reports on stdout and
// never finishes: it publishes it first when afterAck.
func orderRelayUntilKilled(t *testing.T, drv leasework.Driver, afterAck bool) {
	store, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: os.Getenv(envSchema)})
	if err != nil {
		t.Fatal(err)
	}
	e := attachEnv(t, store, splitBrokers(os.Getenv(envBrokers)))
	rl, held := e.orderRelay(), os.Getenv(envHeld)
	h := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if c.EventID == held {
			if afterAck {
				if err := rl.Handle(ctx, c); err != nil {
					return err
				}
			}
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
