package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/twmb/franz-go/pkg/kgo"
)

// keyless makes the shop enqueue its events without a key, so that
// leasework promises no order: `go test -run TestOrderPerKey -keyless` must
// fail, which shows that the order tests can see a misordered topic.
var keyless = flag.Bool("keyless", false, "enqueue events without a key (no order promised): the order tests must then fail")

// The order tests place several orders per customer, interleaved, and check
// what a reader of the topic sees: for each customer, the first delivery of
// each event (the first record with its event id, in offset order; one
// customer's records are in one partition) comes in the order the orders
// were placed, whatever the fault; duplicates come later and are skipped;
// the consumer applies each customer's orders in order, each once.

const (
	orderCustomers = 3
	ordersEach     = 4
)

// placeOrders places ordersEach orders for each of orderCustomers customers,
// round by round (customer-1 #1, customer-2 #1, ..., customer-1 #2, ...),
// and returns them as placed, with their Seq.
func (e *testEnv) placeOrders() []order {
	e.t.Helper()
	var out []order
	for round := 1; round <= ordersEach; round++ {
		for c := 1; c <= orderCustomers; c++ {
			o, err := e.shop.placeOrder(e.ctx, order{
				ID:          fmt.Sprintf("c%d-%d", c, round),
				Customer:    fmt.Sprintf("customer-%d", c),
				AmountCents: int64(1000*c + round),
			})
			if err != nil {
				e.t.Fatal(err)
			}
			if o.Seq != int64(round) {
				e.t.Fatalf("order %s placed as %s #%d; want #%d", o.ID, o.Customer, o.Seq, round)
			}
			out = append(out, o)
		}
	}
	return out
}

// customerKeyed publishes an event without a key (the -keyless run) under
// its customer's record key, as the relay publishes a keyed one, so that the
// topic has the same layout with and without order.
func customerKeyed(next leasework.Handler) leasework.Handler {
	return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		if c.Key == "" {
			var o order
			if err := json.Unmarshal(c.Payload, &o); err != nil {
				return leasework.Permanent(err)
			}
			keyed := *c
			keyed.Key = o.Customer
			c = &keyed
		}
		return next.Handle(ctx, c)
	})
}

// orderRelay is a relay on its own producer, publishing under customer keys.
func (e *testEnv) orderRelay(opts ...kgo.Opt) leasework.Handler {
	return customerKeyed(&relay{client: e.producer(opts...), topic: testTopic})
}

// waitHeld waits until every event but held's is DONE or WAITING: all that
// can be published without held's event was published. It then checks that
// held's customer's later events are WAITING, never attempted, behind it.
func (e *testEnv) waitHeld(orders []order, held order) {
	e.t.Helper()
	waitFor(e.t, "every event but "+held.eventID()+" to be DONE or WAITING", func() (bool, error) {
		for _, o := range orders {
			if o.ID == held.ID {
				continue
			}
			r, err := e.store.GetByEventID(e.ctx, o.eventID())
			if err != nil || (r.Status != leasework.StatusDone && r.Status != leasework.StatusWaiting) {
				return false, err
			}
		}
		return true, nil
	})
	for _, o := range orders {
		if o.Customer != held.Customer || o.Seq <= held.Seq {
			continue
		}
		if r := e.row(o.eventID()); r.Status != leasework.StatusWaiting || r.Attempt != 0 {
			e.t.Errorf("%s (%s #%d) is %s after %d attempts while #%d is held; want WAITING, never attempted",
				o.eventID(), o.Customer, o.Seq, r.Status, r.Attempt, held.Seq)
		}
	}
}

// waitAllDone waits until every order's event is DONE.
func (e *testEnv) waitAllDone(orders []order) {
	e.t.Helper()
	waitFor(e.t, "every event to be DONE", func() (bool, error) {
		for _, o := range orders {
			r, err := e.store.GetByEventID(e.ctx, o.eventID())
			if err != nil || r.Status != leasework.StatusDone {
				return false, err
			}
		}
		return true, nil
	})
}

// wantFirstDeliveriesInOrder checks the topic as a reader sees it: every
// event has a record; one customer's records share a partition; for each
// customer, the first deliveries, in offset order, are its orders in Seq
// order (the commit order of their transactions). It returns the other
// records: the duplicates, in topic order.
func (e *testEnv) wantFirstDeliveriesInOrder(orders []order, recs []published) (dups []published) {
	e.t.Helper()
	byID := map[string]order{}
	want := map[string][]int64{}
	for _, o := range orders {
		byID[o.eventID()] = o
		want[o.Customer] = append(want[o.Customer], o.Seq)
	}
	partition := map[string]int32{}
	first := map[string][]int64{}
	seen := map[string]bool{}
	for _, r := range recs {
		o, ok := byID[r.EventID]
		if !ok {
			e.t.Errorf("record of an event never placed: %+v", r)
			continue
		}
		if p, ok := partition[o.Customer]; ok && p != r.Partition {
			e.t.Errorf("%s has records in partitions %d and %d; one key is one partition", o.Customer, p, r.Partition)
		}
		partition[o.Customer] = r.Partition
		if seen[r.EventID] {
			dups = append(dups, r)
			continue
		}
		seen[r.EventID] = true
		first[o.Customer] = append(first[o.Customer], o.Seq)
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(first[c], want[c]) {
			e.t.Errorf("first deliveries of %s on the topic, in offset order: %v; want %v (the order the orders were placed)", c, first[c], want[c])
		} else {
			e.t.Logf("first deliveries of %s: %v, in partition %d", c, first[c], partition[c])
		}
	}
	return dups
}

// wantAppliedInOrder consumes the topic and checks the consumer's side:
// every order applied once, in its customer's order, and every duplicate
// skipped.
func (e *testEnv) wantAppliedInOrder(orders []order, records, duplicates int) {
	e.t.Helper()
	c := e.consume(records)
	if c.Applied != int64(len(orders)) || c.Duplicates != int64(duplicates) || c.OutOfOrder != 0 || c.Ignored != 0 {
		e.t.Errorf("consumer: %+v; want %d applied, %d duplicates skipped, none out of order", c, len(orders), duplicates)
	}
	sums := map[string]total{}
	for _, o := range orders {
		t := sums[o.Customer]
		t.Orders++
		t.AmountCents += o.AmountCents
		t.LastSeq = max(t.LastSeq, o.Seq)
		sums[o.Customer] = t
	}
	for customer, want := range sums {
		got, err := e.ledger.totalFor(e.ctx, customer)
		if err != nil {
			e.t.Fatal(err)
		}
		want.Customer = customer
		if got != want {
			e.t.Errorf("ledger line of %s: %+v; want %+v (each order once)", customer, got, want)
		}
		applied, err := e.ledger.appliedOf(e.ctx, customer)
		if err != nil {
			e.t.Fatal(err)
		}
		var order []string
		inOrder := len(applied) == int(want.Orders)
		for i, a := range applied {
			order = append(order, fmt.Sprintf("#%d after #%d", a.Seq, a.PrevSeq))
			inOrder = inOrder && a.Seq == int64(i+1) && a.PrevSeq == a.Seq-1
		}
		if !inOrder {
			e.t.Errorf("inbox of %s: %v; want #1 after #0, #2 after #1, ... up to #%d, each once", customer, order, want.Orders)
		}
	}
}

// A paused relay resumes late. Relay A claims customer-1's first order and
// stalls before publishing; relay B runs all along and publishes everything
// else it may: the other customers' orders, but none of customer-1's, whose
// later orders wait behind the held head. A's lease expires (a fixture); B
// claims the head again, publishes it under generation 2, then customer-1's
// later orders in order. A resumes and publishes its stale copy under
// generation 1: a duplicate, at an offset after customer-1's last order. A's
// completion is refused. The first deliveries per customer are in order; the
// consumer applies each order once, in order, and skips the duplicate.
func TestOrderPerKeyPausedRelay(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		e := newEnv(t, drv)
		claimed := make(chan *leasework.Claim, 1)
		resume := make(chan struct{})
		relayA := e.orderRelay()
		var stalled atomic.Bool
		a := e.worker("relay-a", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			if stalled.CompareAndSwap(false, true) {
				claimed <- c
				select {
				case <-resume:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			return relayA.Handle(ctx, c)
		}), framework.Config{Concurrency: 1, Lease: 10 * time.Minute, RenewEvery: 5 * time.Minute}, framework.RetryPolicy{})
		stopA := e.start(a)

		orders := e.placeOrders()
		var claimA *leasework.Claim
		select {
		case claimA = <-claimed:
		case <-time.After(30 * time.Second):
			t.Fatal("relay A claimed nothing within 30s")
		}
		held := orders[slices.IndexFunc(orders, func(o order) bool { return o.eventID() == claimA.EventID })]
		t.Logf("relay A holds %s (%s #%d) at generation %d", held.eventID(), held.Customer, held.Seq, claimA.Generation)

		b := e.worker("relay-b", e.orderRelay(), framework.Config{Concurrency: 4, PollInterval: 50 * time.Millisecond}, framework.RetryPolicy{})
		stopB := e.start(b)
		e.waitHeld(orders, held)

		if err := leasetest.ExpireLease(e.ctx, e.store, claimA.ID); err != nil { // A's lease runs out while it stalls
			t.Fatal(err)
		}
		e.waitAllDone(orders)
		stopB()
		e.wantRow(held.eventID(), leasework.StatusDone, claimA.Generation+1)

		close(resume)
		waitFor(t, "A's late completion to be refused", func() (bool, error) {
			return a.Counters().StaleRejections == 1, nil
		})
		stopA()
		if c := a.Counters(); c.Completed != 0 {
			t.Errorf("relay A completed %d events; want 0", c.Completed)
		}

		recs := e.records()
		if len(recs) != len(orders)+1 {
			t.Fatalf("topic holds %d records; want %d (every order once, and A's late copy)", len(recs), len(orders)+1)
		}
		dups := e.wantFirstDeliveriesInOrder(orders, recs)
		if len(dups) != 1 || dups[0].EventID != held.eventID() || dups[0].Generation != claimA.Generation {
			t.Fatalf("duplicates on the topic: %+v; want A's late copy of %s, generation %d", dups, held.eventID(), claimA.Generation)
		}
		for _, r := range recs {
			if r.Partition == dups[0].Partition && r.Offset > dups[0].Offset {
				t.Errorf("record %+v after A's late copy at offset %d; want the copy last", r, dups[0].Offset)
			}
		}
		t.Logf("A's late copy: %s generation %d at %s[%d]@%d, after the rest of %s's orders",
			dups[0].EventID, dups[0].Generation, testTopic, dups[0].Partition, dups[0].Offset, held.Customer)
		e.wantAppliedInOrder(orders, len(recs), 1)
	})
}

// A broker outage: every produce request is refused or dropped while the
// orders wait in the outbox. Only each customer's head is attempted, again
// and again with backoff; the later orders wait behind it, never attempted.
// When the broker is back, the first deliveries per customer are in order
// and the consumer applies each order once, in order.
func TestOrderPerKeyBrokerOutage(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, c := range []struct {
			name  string
			start outage
		}{{"rejecting", rejectProduce}, {"down", dropProduce}} {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, drv)
				hits, end := c.start(e)
				orders := e.placeOrders()
				rl := e.orderRelay(append(fastRetries, kgo.RecordDeliveryTimeout(time.Second))...)
				w := e.worker("relay", rl, framework.Config{}, fastPolicy)
				e.start(w)

				waitFor(t, "every customer's first order to be attempted three times", func() (bool, error) {
					for _, o := range orders {
						if r, err := e.store.GetByEventID(e.ctx, o.eventID()); err != nil || (o.Seq == 1 && r.Attempt < 3) {
							return false, err
						}
					}
					return true, nil
				})
				if hits() == 0 {
					t.Fatal("the outage refused no produce request")
				}
				for _, o := range orders {
					r := e.row(o.eventID())
					if o.Seq == 1 && (r.Status == leasework.StatusDone || r.Status == leasework.StatusFailed) {
						t.Fatalf("%s is %s during the outage", o.eventID(), r.Status)
					}
					if o.Seq > 1 && (r.Status != leasework.StatusWaiting || r.Attempt != 0) {
						t.Errorf("%s (%s #%d) is %s after %d attempts during the outage; want WAITING behind #1, never attempted",
							o.eventID(), o.Customer, o.Seq, r.Status, r.Attempt)
					}
				}
				if recs := e.records(); len(recs) != 0 {
					t.Fatalf("the topic holds %d records during the outage", len(recs))
				}

				end()
				e.waitAllDone(orders)
				recs := e.records()
				dups := e.wantFirstDeliveriesInOrder(orders, recs)
				t.Logf("outage refused %d produce requests; after it, %d records, %d duplicates", hits(), len(recs), len(dups))
				e.wantAppliedInOrder(orders, len(recs), len(dups))
			})
		}
	})
}

// A FAILED event holds its customer: the relay fails customer-2's first
// order permanently; the other customers' orders are published, customer-2's
// later orders wait behind the FAILED one, and nothing of customer-2 is on
// the topic. HeldKeys names the key. Then an operator either requeues the
// event (`leasework requeue`): it is published first, then the rest, in
// order; or discards it (`leasework discard`): the rest are published in
// order, the discarded one never, and the consumer sees the gap in
// customer-2's Seq (one order applied after #0 that is not #1).
func TestOrderPerKeyFailedHoldsCustomer(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		for _, repair := range []string{"requeue", "discard"} {
			t.Run(repair, func(t *testing.T) {
				e := newEnv(t, drv)
				orders := e.placeOrders()
				held := orders[1] // customer-2 #1
				if held.Customer != "customer-2" || held.Seq != 1 {
					t.Fatalf("orders[1] is %s #%d; want customer-2 #1", held.Customer, held.Seq)
				}
				var failing atomic.Bool
				failing.Store(true)
				rl := e.orderRelay()
				w := e.worker("relay", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
					if c.EventID == held.eventID() && failing.Load() {
						return leasework.Permanent(fmt.Errorf("%s refused by the test", c.EventID))
					}
					return rl.Handle(ctx, c)
				}), framework.Config{PollInterval: 50 * time.Millisecond}, framework.RetryPolicy{})
				e.start(w)

				e.waitHeld(orders, held)
				row := e.row(held.eventID())
				if row.Status != leasework.StatusFailed {
					t.Fatalf("%s is %s; want FAILED", held.eventID(), row.Status)
				}
				keys, err := e.store.HeldKeys(e.ctx, lease.HeldKeysRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if len(keys) != 1 || keys[0].Key != held.Customer || keys[0].EventID != held.eventID() || keys[0].Waiting != ordersEach-1 {
					t.Fatalf("held keys: %+v; want %s held by %s with %d waiting", keys, held.Customer, held.eventID(), ordersEach-1)
				}
				for _, r := range e.records() {
					if strings.HasPrefix(r.EventID, "order-c2-") {
						t.Fatalf("a record of %s while its first order is FAILED: %+v", held.Customer, r)
					}
				}

				failing.Store(false)
				want := orders
				switch repair {
				case "requeue":
					if ids, err := e.store.Requeue(e.ctx, lease.RequeueRequest{IDs: []int64{row.ID}}); err != nil || len(ids) != 1 {
						t.Fatalf("requeue %d: %v, %v", row.ID, ids, err)
					}
				case "discard":
					if _, err := e.store.Discard(e.ctx, leasework.Ref{ID: row.ID, Generation: row.Generation}); err != nil {
						t.Fatalf("discard %d: %v", row.ID, err)
					}
					want = slices.DeleteFunc(slices.Clone(orders), func(o order) bool { return o.ID == held.ID })
				}
				e.waitAllDone(want)
				recs := e.records()
				if len(recs) != len(want) {
					t.Fatalf("topic holds %d records; want %d", len(recs), len(want))
				}
				if dups := e.wantFirstDeliveriesInOrder(want, recs); len(dups) != 0 {
					t.Errorf("duplicates on the topic: %+v; want none", dups)
				}
				if repair == "requeue" {
					e.wantAppliedInOrder(orders, len(recs), 0)
					return
				}
				if c := e.consume(len(recs)); c.Applied != int64(len(want)) || c.OutOfOrder != 1 {
					t.Errorf("consumer after the discard: %+v; want %d applied, 1 of them (customer-2 #2, after #0) out of order", c, len(want))
				}
				got, err := e.ledger.totalFor(e.ctx, held.Customer)
				if err != nil {
					t.Fatal(err)
				}
				if got.Orders != ordersEach-1 || got.LastSeq != ordersEach {
					t.Errorf("ledger line of %s: %+v; want %d orders up to #%d", held.Customer, got, ordersEach-1, ordersEach)
				}
			})
		}
	})
}
