package main

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A broker that rejects or drops produce requests: the events stay in the
// outbox and are retried with backoff, nothing is marked DONE that the
// broker did not acknowledge, and once the broker is back every event is
// delivered, each DONE event by a record of its final generation.
func TestBrokerOutage(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		t.Run("rejecting", func(t *testing.T) { brokerOutage(t, drv, rejectProduce) })
		t.Run("down", func(t *testing.T) { brokerOutage(t, drv, dropProduce) })
		t.Run("stop while down", func(t *testing.T) { stopWhileDown(t, drv) })
	})
}

// An outage starts when made and ends when its end is called; hits counts
// the produce requests it refused.
type outage func(e *testEnv) (hits func() int64, end func())

// rejectProduce answers every produce request with NOT_ENOUGH_REPLICAS, what
// acks=all gets from a cluster short of in-sync replicas.
func rejectProduce(e *testEnv) (func() int64, func()) {
	f := e.cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: testTopic,
		Err:   kerr.NotEnoughReplicas,
		Count: -1, // until removed
	})
	return func() int64 { return int64(f.Hits()) }, f.Remove
}

// dropProduce closes the connection of every produce request before the
// broker reads it, as a broker that went away: the client cannot tell
// whether the request was written.
func dropProduce(e *testEnv) (func() int64, func()) {
	var up atomic.Bool
	var dropped atomic.Int64
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if up.Load() {
			e.cluster.DropControl()
			return nil, nil, false // handled normally from now on
		}
		dropped.Add(1)
		e.cluster.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	return dropped.Load, func() { up.Store(true) }
}

// fastRetries make the producer refresh metadata and retry requests sooner
// than its defaults (at most one metadata refresh per 5s, which a failed
// produce request waits for before it is retried, or given up), so that an
// outage takes seconds of test rather than tens.
var fastRetries = []kgo.Opt{
	kgo.MetadataMinAge(50 * time.Millisecond),
	kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
}

var fastPolicy = framework.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 400 * time.Millisecond}

func brokerOutage(t *testing.T, drv leasework.Driver, start outage) {
	e := newEnv(t, drv)
	hits, end := start(e)
	orders := e.placeN(3)
	// The producer gives a record up after a second.
	producer := e.producer(append(fastRetries, kgo.RecordDeliveryTimeout(time.Second))...)
	w := e.worker("relay", &relay{client: producer, topic: testTopic}, framework.Config{}, fastPolicy)
	e.start(w)

	waitFor(t, "every event to be attempted three times", func() (bool, error) {
		for _, o := range orders {
			if r := e.row(o.eventID()); r.Attempt < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if hits() == 0 {
		t.Fatal("the outage refused no produce request")
	}
	for _, o := range orders {
		r := e.row(o.eventID())
		switch {
		case r.Status == leasework.StatusDone || r.Status == leasework.StatusFailed:
			t.Fatalf("%s is %s during the outage", o.eventID(), r.Status)
		case r.Status == leasework.StatusReady && !strings.Contains(r.LastError, "publish event "+o.eventID()):
			t.Fatalf("%s: last error %q; want the relay's produce error", o.eventID(), r.LastError)
		case r.Status == leasework.StatusReady && !r.NextAttemptAt.After(r.UpdatedAt):
			t.Fatalf("%s: retry due at %v, scheduled at %v; want a backoff delay", o.eventID(), r.NextAttemptAt, r.UpdatedAt)
		}
	}
	if c := w.Counters(); c.Retried < int64(2*len(orders)) || c.Completed != 0 {
		t.Fatalf("worker: %+v; want at least %d retries and no completion", c, 2*len(orders))
	}
	if recs := e.records(); len(recs) != 0 {
		t.Fatalf("the topic holds %d records during the outage", len(recs))
	}
	t.Logf("outage refused %d produce requests; %d retries, no event DONE; last error: %s",
		hits(), w.Counters().Retried, e.row(orders[0].eventID()).LastError)

	end()
	e.wantDelivered(orders, w)
}

// A worker stopped while the broker is down does not wait for it: the
// handlers' contexts end, the producer gives the in-flight records up, and
// the claims are released to READY, to be published by the next worker once
// the broker is back.
func stopWhileDown(t *testing.T, drv leasework.Driver) {
	e := newEnv(t, drv)
	hits, end := dropProduce(e)
	orders := e.placeN(2)
	// A delivery timeout far beyond the test: only the context can end the
	// handlers.
	producer := e.producer(append(fastRetries, kgo.RecordDeliveryTimeout(time.Hour))...)
	rl := &relay{client: producer, topic: testTopic}
	w := e.worker("relay", rl, framework.Config{GracePeriod: -1}, fastPolicy)
	stop := e.start(w)
	waitFor(t, "both events to be claimed and their requests dropped", func() (bool, error) {
		return w.Counters().Claimed == 2 && hits() >= 3, nil
	})

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30s while the broker was down")
	}
	if c := w.Counters(); c.Released != 2 || c.Completed != 0 {
		t.Fatalf("worker after stop: %+v; want 2 claims released, none completed", c)
	}
	for _, o := range orders {
		if r := e.row(o.eventID()); r.Status != leasework.StatusReady {
			t.Fatalf("%s is %s after the stop; want READY (released)", o.eventID(), r.Status)
		}
	}

	end()
	next := e.worker("relay-next", rl, framework.Config{}, fastPolicy)
	e.start(next)
	e.wantDelivered(orders, next)
}

// placeN places n orders of n different customers.
func (e *testEnv) placeN(n int) []order {
	var orders []order
	for i := range n {
		o := order{ID: fmt.Sprint(i + 1), Customer: fmt.Sprintf("customer-%d", i+1), AmountCents: int64(100 * (i + 1))}
		e.place(o)
		orders = append(orders, o)
	}
	return orders
}

// wantDelivered waits until w has completed every order's event, then
// checks that each DONE event has a record of its final generation in the
// topic (a record is never missing for an event marked DONE) and that the
// consumer applies each event once.
func (e *testEnv) wantDelivered(orders []order, w *framework.Worker) {
	e.t.Helper()
	waitFor(e.t, "every event to be DONE", func() (bool, error) {
		return w.Counters().Completed == int64(len(orders)), nil
	})
	recs := e.records()
	for _, o := range orders {
		r := e.row(o.eventID())
		if r.Status != leasework.StatusDone {
			e.t.Fatalf("%s is %s; want DONE", o.eventID(), r.Status)
		}
		found := false
		for _, rec := range recs {
			found = found || (rec.EventID == o.eventID() && rec.Generation == r.Generation)
		}
		if !found {
			e.t.Fatalf("%s is DONE at generation %d, but the topic has no record of that generation: %+v", o.eventID(), r.Generation, recs)
		}
	}
	c := e.consume(len(recs))
	if c.Applied != int64(len(orders)) || c.Applied+c.Duplicates != int64(len(recs)) {
		e.t.Fatalf("consumer: %+v for %d records of %d events; want each event applied once", c, len(recs), len(orders))
	}
	for _, o := range orders {
		e.wantApplied(o)
	}
	e.t.Logf("after the outage: %d events DONE, %d records, %d applied, %d duplicates skipped", len(orders), len(recs), c.Applied, c.Duplicates)
}
