package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// consumer reads the topic in a consumer group and applies each event to the
// ledger, once per event id. Offsets are committed only after every record of
// a poll is applied, so a crash redelivers records rather than skipping
// them; the ledger's inbox turns those redeliveries, and the relay's own
// duplicates, into no-ops.
//
// One customer's records are in one partition, in the order the relay
// published them, and the consumer applies a partition's records one after
// the other: each customer's orders are applied in Seq order, as long as
// the relay published their first deliveries in that order. The ledger
// checks it, and the consumer counts and logs an order applied out of its
// customer's order (OutOfOrder).
type consumer struct {
	client *kgo.Client
	ledger *ledger
	log    *slog.Logger

	// seen, when set, is called for every record after it was handled:
	// how is zero for a record the ledger does not use.
	seen func(e envelope, o order, r *kgo.Record, how applied)

	consumed, applied, duplicates, outOfOrder, ignored atomic.Int64
}

// consumerCounts is a snapshot of what a consumer did.
type consumerCounts struct {
	Consumed   int64 // records read and handled (applied, skipped or ignored)
	Applied    int64 // events whose effect was applied
	Duplicates int64 // events already in the inbox: skipped
	OutOfOrder int64 // of Applied, orders applied out of their customer's Seq order
	Ignored    int64 // records without the relay's headers, or of another kind
}

func (c *consumer) counts() consumerCounts {
	return consumerCounts{c.consumed.Load(), c.applied.Load(), c.duplicates.Load(), c.outOfOrder.Load(), c.ignored.Load()}
}

// newConsumerClient returns a franz-go group consumer of topic that starts
// from the beginning of the topic and commits only when told to.
func newConsumerClient(brokers []string, topic, group string, extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),    // commit after applying, never before
		kgo.BlockRebalanceOnPoll(), // no partition moves while a poll is being applied
	}, extra...)...)
}

// run consumes until ctx ends. Database errors are retried, record by
// record, so no record is skipped; the offsets of a poll are committed once
// all its records are applied.
func (c *consumer) run(ctx context.Context) {
	for {
		fetches := c.client.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			c.client.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.log.Warn("fetch failed", "topic", topic, "partition", partition, "err", err)
		})
		for _, r := range fetches.Records() {
			if !c.handle(ctx, r) {
				c.client.AllowRebalance()
				return // ctx ended: the uncommitted records come again
			}
		}
		if err := c.client.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("offset commit failed; the records will be delivered again and skipped", "err", err)
		}
		c.client.AllowRebalance()
	}
}

// handle applies one record, retrying database errors until ctx ends. It
// returns false only when ctx ended before the record was applied.
func (c *consumer) handle(ctx context.Context, r *kgo.Record) bool {
	e, err := parseRecord(r)
	var o order
	if err == nil && e.Kind == kindOrderPlaced {
		err = json.Unmarshal(r.Value, &o)
	}
	if err != nil || e.Kind != kindOrderPlaced {
		c.ignored.Add(1)
		c.log.Warn("record ignored", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "kind", e.Kind, "err", err)
		c.report(e, o, r, 0)
		return true
	}
	wait := 50 * time.Millisecond
	for {
		how, err := c.ledger.applyOrder(ctx, e, where{r.Topic, r.Partition, r.Offset}, o)
		if err == nil {
			switch how {
			case alreadyApplied:
				c.duplicates.Add(1)
			case appliedOutOfOrder:
				c.applied.Add(1)
				c.outOfOrder.Add(1)
				c.log.Warn("order applied out of its customer's order", "event_id", e.EventID, "customer", o.Customer, "seq", o.Seq,
					"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
			default:
				c.applied.Add(1)
			}
			c.report(e, o, r, how)
			return true
		}
		c.log.Warn("apply failed; trying again", "event_id", e.EventID, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// report counts a handled record and passes it to seen.
func (c *consumer) report(e envelope, o order, r *kgo.Record, how applied) {
	c.consumed.Add(1)
	if c.seen != nil {
		c.seen(e, o, r, how)
	}
}
