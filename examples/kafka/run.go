package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/lease"
	"github.com/twmb/franz-go/pkg/kgo"
)

// run places o.events orders, relays their events to Kafka with a leasework
// worker, consumes them into the ledger, and prints what happened on out.
// Logs go to logw.
func run(ctx context.Context, o options, out, logw io.Writer) error {
	p := &printer{w: out}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level}))

	dsn, stopPG, err := pgserver.Resolve(ctx, o.dsn)
	if err != nil {
		return err
	}
	if stopPG != nil {
		defer stopPG()
		p.printf("no -dsn and no %s: started a throwaway PostgreSQL", pgserver.EnvDSN)
	}
	brokers := splitBrokers(o.brokers)
	if len(brokers) == 0 {
		cluster, err := startFakeBroker()
		if err != nil {
			return err
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		p.printf("no -brokers: started an in-process Kafka broker (kfake) at %s", strings.Join(brokers, ","))
	}

	drv := pgx.New()
	db, err := drv.Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := lease.New(db, drv, lease.Options{Schema: o.schema})
	if err != nil {
		return err
	}
	if _, err := store.Migrate(ctx); err != nil {
		return err
	}
	shop, ledger := newShop(store), newLedger(db, o.schema)
	if err := shop.migrate(ctx); err != nil {
		return err
	}
	if err := ledger.migrate(ctx); err != nil {
		return err
	}

	producer, err := newProducer(brokers, o.deliveryTimeout)
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := ensureTopic(ctx, producer, o.topic, int32(o.partitions)); err != nil {
		return err
	}
	consumerClient, err := newConsumerClient(brokers, o.topic, o.group)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer consumerClient.Close()

	var published atomic.Int64
	rl := &relay{client: producer, topic: o.topic, published: func(c *leasework.Claim, r *kgo.Record) {
		published.Add(1)
		p.printf("published %s key=%s generation=%d -> %s[%d]@%d", c.EventID, r.Key, c.Generation, r.Topic, r.Partition, r.Offset)
	}}
	var h leasework.Handler = rl
	if o.redeliver {
		h = &failAfterAckOnce{next: rl, p: p}
	}
	// Retention zero: DONE rows are kept 24h (framework.DedupeWindow), so an
	// order's event id enqueued again within a day is refused as a duplicate,
	// and operators (and this summary) can see them.
	w, err := framework.New(db, drv, framework.Config{
		Schema: o.schema,
		Logger: log,
	})
	if err != nil {
		return err
	}
	if err := w.Register(kindOrderPlaced, h, framework.RetryPolicy{
		InitialInterval: 500 * time.Millisecond,
		MaxInterval:     30 * time.Second,
	}); err != nil {
		return err
	}
	c := &consumer{client: consumerClient, ledger: ledger, log: log, seen: func(e envelope, o order, r *kgo.Record, how applied) {
		what := fmt.Sprintf("applied, %s #%d", o.Customer, o.Seq)
		switch how {
		case alreadyApplied:
			what = "already in the inbox: skipped"
		case appliedOutOfOrder:
			what = fmt.Sprintf("applied OUT OF ORDER, %s #%d", o.Customer, o.Seq)
		}
		p.printf("consumed  %s generation=%d <- %s[%d]@%d: %s", e.EventID, e.Generation, r.Topic, r.Partition, r.Offset, what)
	}}

	workerCtx, stopWorker := context.WithCancel(ctx)
	consumerCtx, stopConsumer := context.WithCancel(ctx)
	var workers, consumers sync.WaitGroup
	defer func() { // also on an early return
		stopWorker()
		workers.Wait()
		stopConsumer()
		consumers.Wait()
	}()
	workers.Go(func() { _ = w.Run(workerCtx) }) // Run returns nil after a stop
	consumers.Go(func() { c.run(consumerCtx) })

	placed, err := placeOrders(ctx, shop, o, p)
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// Done when every event is DONE and applied, and the consumer has read
	// every record the broker acknowledged (duplicates included).
	caughtUp := func() bool { return c.counts().Consumed >= published.Load() }
	rows, err := waitDelivered(waitCtx, store, ledger, placed, caughtUp)
	if err != nil {
		return err
	}
	stopWorker()
	workers.Wait()
	stopConsumer()
	consumers.Wait()
	return summarize(ctx, p, placed, rows, published.Load(), c.counts(), w.Counters(), ledger, o.customers)
}

// placeOrders places o.events orders, spread over o.customers customers,
// and returns their event ids in order.
func placeOrders(ctx context.Context, s *shop, o options, p *printer) ([]string, error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	runID := hex.EncodeToString(b[:]) // so that runs against one database do not collide
	ids := make([]string, 0, o.events)
	for i := range o.events {
		ord := order{
			ID:          fmt.Sprintf("%s-%03d", runID, i+1),
			Customer:    fmt.Sprintf("customer-%d", i%o.customers+1),
			AmountCents: int64(500 + 125*i),
		}
		ord, err := s.placeOrder(ctx, ord)
		if err != nil {
			return nil, err
		}
		p.printf("placed    order %s for %s #%d (%s): %s is in the outbox", ord.ID, ord.Customer, ord.Seq, money(ord.AmountCents), ord.eventID())
		ids = append(ids, ord.eventID())
	}
	return ids, nil
}

// waitDelivered polls until every event is DONE in the outbox and applied
// in the ledger, and caughtUp reports true; it returns the outbox rows.
func waitDelivered(ctx context.Context, store *lease.Store, l *ledger, ids []string, caughtUp func() bool) ([]lease.Row, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, inboxed, err := delivery(ctx, store, l, ids)
		if err == nil && len(inboxed) == len(ids) && allDone(rows) && caughtUp() {
			return rows, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d of %d events applied by the consumer, %d of %d DONE in the outbox",
					len(inboxed), len(ids), countDone(rows), len(ids))
			}
			return nil, fmt.Errorf("not every event was delivered in time: %w", err)
		case <-tick.C:
		}
	}
}

func delivery(ctx context.Context, store *lease.Store, l *ledger, ids []string) ([]lease.Row, map[string]int64, error) {
	rows := make([]lease.Row, 0, len(ids))
	for _, id := range ids {
		r, err := store.GetByEventID(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, r)
	}
	inboxed, err := l.inboxed(ctx, ids)
	return rows, inboxed, err
}

func allDone(rows []lease.Row) bool { return countDone(rows) == len(rows) }

func countDone(rows []lease.Row) int {
	n := 0
	for _, r := range rows {
		if r.Status == leasework.StatusDone {
			n++
		}
	}
	return n
}
