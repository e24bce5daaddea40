package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasework/leasework"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// relay is the leasework handler that publishes each claimed event to Kafka.
// Register it for every kind of event that goes to the topic.
//
// Handle returns only after the broker acknowledged the record (acks=all),
// so an event is marked DONE only once it is in the topic. It returns the
// produce error otherwise, and the worker retries the event under the kind's
// retry policy: a broker that is down or rejecting writes leaves events in
// the outbox, never loses them.
//
// What it cannot do is take back a record the broker already acknowledged.
// If the worker dies, or stalls past its lease, after the acknowledgment and
// before DONE is written, another worker publishes the event again under a
// higher generation. Delivery is at least once; consumers deduplicate on the
// event id (see consumer.go).
//
// Order comes from the outbox, not from the relay: events enqueued with the
// same key (here the customer) are claimed one at a time, in the order
// their transactions committed, and a key's next event is claimed only once
// its head is DONE, that is after the broker acknowledged the head's
// record. So the first record of each event of one key is written in
// enqueue order, however many handlers and workers run, through retries,
// kills and pauses. Only duplicates can come later than that.
type relay struct {
	client *kgo.Client
	topic  string

	// published, when set, is called after the broker acknowledged a
	// record, before Handle returns.
	published func(c *leasework.Claim, r *kgo.Record)
}

// Handle publishes one event and waits for the broker's acknowledgment, for
// at most the producer's record delivery timeout, and no longer than ctx:
// ctx ends when the claim's lease is lost, the worker stops or the attempt
// times out.
func (r *relay) Handle(ctx context.Context, c *leasework.Claim) error {
	rec := newRecord(r.topic, c)
	if err := r.client.ProduceSync(ctx, rec).FirstErr(); err != nil {
		err = fmt.Errorf("publish event %s (generation %d) to %s: %w", c.EventID, c.Generation, r.topic, err)
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) {
			return leasework.Permanent(err) // the same record fails the same way every time
		}
		return err
	}
	if r.published != nil {
		r.published(c, rec)
	}
	return nil
}

// newProducer returns a franz-go client for the relay. It spells out what
// the relay relies on:
//
//   - acks=all: Handle returns only after every in-sync replica has the
//     record;
//   - idempotent production (franz-go's default, kept): the client's own
//     retries of a produce request are not written twice;
//   - a record delivery timeout, after which the client gives a record up
//     and the worker's retry policy takes over;
//   - in-flight records may be given up too, when the delivery timeout
//     passes or the handler's context ends. By default an idempotent
//     franz-go producer refuses to fail a record whose request was sent and
//     not answered (it cannot know whether the broker wrote it), so a
//     broker that stops answering would hold the handler, its lease and
//     the worker's shutdown, without end. Giving the record up instead may
//     publish it twice when the retry runs: a duplicate of the kind a lost
//     lease already allows, with the same event id, which consumers skip.
func newProducer(brokers []string, deliveryTimeout time.Duration, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.AllowIdempotentProduceCancellation(),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return cl, nil
}
