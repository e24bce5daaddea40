package main

import (
	"sync"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// The inbox applies an event once, however often and however concurrently
// it is delivered: of eight transactions applying the same event at once,
// exactly one adds it to the totals.
func TestInboxAppliesEachEventOnce(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		e := newEnv(t, drv)
		o := order{ID: "1", Customer: "customer-1", Seq: 1, AmountCents: 999}
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied := 0
		for gen := range 8 {
			wg.Go(func() {
				env := envelope{EventID: o.eventID(), Kind: kindOrderPlaced, Generation: int64(gen + 1)}
				how, err := e.ledger.applyOrder(e.ctx, env, where{testTopic, 0, int64(gen)}, o)
				if err != nil {
					t.Error(err)
					return
				}
				if how != alreadyApplied {
					mu.Lock()
					applied++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if applied != 1 {
			t.Fatalf("%d of 8 deliveries applied the event; want 1", applied)
		}
		if got, err := e.ledger.appliedOf(e.ctx, o.Customer); err != nil || len(got) != 1 || got[0].Seq != 1 || got[0].PrevSeq != 0 {
			t.Fatalf("inbox of %s: %+v (%v); want the event once, as #1 after #0", o.Customer, got, err)
		}
		e.wantApplied(o)
	})
}

// Records carry the event id, kind and generation in headers, and the
// event's key, or its id when it has none.
func TestRecordHeaders(t *testing.T) {
	for _, c := range []leasework.Claim{
		{EventID: "e-1", Kind: "order.placed", Key: "customer-9", Payload: []byte(`{}`), Generation: 3},
		{EventID: "e-2", Kind: "order.placed", Generation: 1},
	} {
		r := newRecord("t", &c)
		wantKey := c.Key
		if wantKey == "" {
			wantKey = c.EventID
		}
		if string(r.Key) != wantKey || r.Topic != "t" || string(r.Value) != string(c.Payload) {
			t.Fatalf("record of %+v: key %q topic %q value %q", c, r.Key, r.Topic, r.Value)
		}
		e, err := parseRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if e != (envelope{EventID: c.EventID, Kind: c.Kind, Generation: c.Generation}) {
			t.Fatalf("headers of %+v read back as %+v", c, e)
		}
	}
	r := newRecord("t", &leasework.Claim{EventID: "e-3", Kind: "k", Generation: 1})
	r.Headers = r.Headers[1:] // no event id: not the relay's
	if _, err := parseRecord(r); err == nil {
		t.Fatal("a record without an event id header parsed")
	}
}
