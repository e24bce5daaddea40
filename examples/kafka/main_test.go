package main

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tests run against a real PostgreSQL (pgtest: $LEASEWORK_DSN or a
// throwaway server) and an in-process Kafka broker (kfake), each test in a
// schema and a broker of its own.
func TestMain(m *testing.M) { pgtest.Main(m) }

const testTopic = "orders"

// testEnv is one test's world: the outbox and the example's tables in a
// fresh schema, and a broker holding the topic.
type testEnv struct {
	t       *testing.T
	ctx     context.Context
	store   *lease.Store
	shop    *shop
	ledger  *ledger
	cluster *kfake.Cluster
	brokers []string
}

func newEnv(t *testing.T, drv leasework.Driver) *testEnv {
	t.Helper()
	cluster, err := startFakeBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	e := attachEnv(t, pgtest.Store(t, drv, lease.Options{}), cluster.ListenAddrs())
	e.cluster = cluster
	e.shop.keyless = *keyless
	if err := e.shop.migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := ensureTopic(e.ctx, e.producer(), testTopic, 3); err != nil {
		t.Fatal(err)
	}
	return e
}

// attachEnv is the env of a store and brokers made elsewhere: by the
// parent test, for a child process.
func attachEnv(t *testing.T, store *lease.Store, brokers []string) *testEnv {
	return &testEnv{
		t:       t,
		ctx:     t.Context(),
		store:   store,
		shop:    newShop(store),
		ledger:  newLedger(store.DB(), store.Schema()),
		brokers: brokers,
	}
}

// producer returns a relay producer on the env's broker, closed at the end
// of the test.
func (e *testEnv) producer(opts ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := newProducer(e.brokers, 10*time.Second, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// worker makes a worker on the env's table that keeps DONE rows.
func (e *testEnv) worker(id string, h leasework.Handler, cfg framework.Config, p framework.RetryPolicy) *framework.Worker {
	e.t.Helper()
	cfg.Schema, cfg.WorkerID, cfg.Retention = e.store.Schema(), id, -1
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w, err := framework.New(e.store.DB(), e.store.Driver(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Register(kindOrderPlaced, h, p); err != nil {
		e.t.Fatal(err)
	}
	return w
}

// start runs w until the returned stop is called or the test ends; stop
// waits for Run to return.
func (e *testEnv) start(w *framework.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			e.t.Errorf("worker %s: Run: %v", w.ID(), err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	e.t.Cleanup(stop)
	return stop
}

// place places an order and returns its outbox row.
func (e *testEnv) place(o order) lease.Row {
	e.t.Helper()
	placed, err := e.shop.placeOrder(e.ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.row(placed.eventID())
}

func (e *testEnv) row(eventID string) lease.Row {
	e.t.Helper()
	r, err := e.store.GetByEventID(e.ctx, eventID)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// published is one record of the topic, as a reader sees it.
type published struct {
	envelope
	Partition int32
	Offset    int64
}

// records reads the whole topic, in partition and offset order.
func (e *testEnv) records() []published {
	e.t.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(e.ctx, testTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		e.t.Fatalf("end offsets of %s: %v", testTopic, err)
	}
	want := map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		want[o.Partition] = o.Offset
		total += o.Offset
	})
	if total == 0 {
		return nil
	}
	// A fetch that finds no new data in the partitions it asks for waits up
	// to the fetch maximum wait (5s by default) before it answers, and a
	// reader's first fetches can be such ones (seen here as 5s pauses in
	// about one run of fifteen): keep the wait short.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var out []published
	for int64(len(out)) < total {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			e.t.Fatalf("read %s: %d of %d records after 30s", testTopic, len(out), total)
		}
		fetches.EachError(func(_ string, p int32, err error) { e.t.Fatalf("read %s[%d]: %v", testTopic, p, err) })
		for _, r := range fetches.Records() {
			if r.Offset >= want[r.Partition] {
				continue // published after the end offsets were read
			}
			env, err := parseRecord(r)
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, published{env, r.Partition, r.Offset})
		}
	}
	slices.SortFunc(out, func(a, b published) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out
}

// consume runs the example's consumer, in a consumer group of its own, until
// it has read n records, and returns its counts.
func (e *testEnv) consume(n int) consumerCounts {
	e.t.Helper()
	cl, err := newConsumerClient(e.brokers, testTopic, "test-"+e.store.Schema(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	c := &consumer{client: cl, ledger: e.ledger, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	waitFor(e.t, "the consumer to read every record", func() (bool, error) {
		return c.counts().Consumed >= int64(n), nil
	})
	return c.counts()
}

// waitBound is how long waitFor waits: a liveness bound, generous for a
// busy machine, where a publish through the in-process broker and the
// relay's retries behind it have taken over 30 seconds.
const waitBound = 2 * time.Minute

// waitFor polls cond until it holds, failing the test after waitBound.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s (last error: %v)", waitBound, what, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		case <-tick.C:
		}
	}
}

// wantRow fails the test unless the row is in the given state.
func (e *testEnv) wantRow(eventID string, status leasework.Status, generation int64) lease.Row {
	e.t.Helper()
	r := e.row(eventID)
	if r.Status != status || r.Generation != generation {
		e.t.Fatalf("row of %s is %s at generation %d; want %s at generation %d", eventID, r.Status, r.Generation, status, generation)
	}
	return r
}

// wantApplied checks the consumer side: the event is in the inbox once, and
// the customer's totals count it once.
func (e *testEnv) wantApplied(o order) {
	e.t.Helper()
	got, err := e.ledger.inboxed(e.ctx, []string{o.eventID()})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, ok := got[o.eventID()]; !ok {
		e.t.Fatalf("%s is not in the inbox", o.eventID())
	}
	tot, err := e.ledger.totalFor(e.ctx, o.Customer)
	if err != nil {
		e.t.Fatal(err)
	}
	if tot.Orders != 1 || tot.AmountCents != o.AmountCents {
		e.t.Fatalf("totals of %s: %d orders, %d cents; want the order applied once: 1 order, %d cents",
			o.Customer, tot.Orders, tot.AmountCents, o.AmountCents)
	}
}
