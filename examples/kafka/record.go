package main

import (
	"fmt"
	"strconv"

	"github.com/leasework/leasework"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers the relay puts on every record. The event id is the stable
// identity consumers deduplicate on; the generation is the claim's fencing
// token, which tells a consumer (or a reader of the topic) which claim
// published the record. A record published twice carries the same event id
// and two different generations.
const (
	headerEventID    = "leasework-event-id"
	headerKind       = "leasework-kind"
	headerGeneration = "leasework-generation"
)

// newRecord is the Kafka record for one claimed event. Its key is the
// event's key (an aggregate id, set at enqueue), or the event id when the
// event has none, so that the events of one aggregate share a partition.
func newRecord(topic string, c *leasework.Claim) *kgo.Record {
	key := c.Key
	if key == "" {
		key = c.EventID
	}
	return &kgo.Record{
		Topic: topic,
		Key:   []byte(key),
		Value: c.Payload,
		Headers: []kgo.RecordHeader{
			{Key: headerEventID, Value: []byte(c.EventID)},
			{Key: headerKind, Value: []byte(c.Kind)},
			{Key: headerGeneration, Value: []byte(strconv.FormatInt(c.Generation, 10))},
		},
	}
}

// envelope is what a consumer reads from a record's headers.
type envelope struct {
	EventID    string
	Kind       string
	Generation int64
}

// parseRecord reads the relay's headers back from a record. A record without
// an event id was not published by the relay.
func parseRecord(r *kgo.Record) (envelope, error) {
	var e envelope
	var gen string
	for _, h := range r.Headers {
		switch h.Key {
		case headerEventID:
			e.EventID = string(h.Value)
		case headerKind:
			e.Kind = string(h.Value)
		case headerGeneration:
			gen = string(h.Value)
		}
	}
	if e.EventID == "" {
		return envelope{}, fmt.Errorf("record %s[%d]@%d has no %s header", r.Topic, r.Partition, r.Offset, headerEventID)
	}
	g, err := strconv.ParseInt(gen, 10, 64)
	if err != nil || g < 1 {
		return envelope{}, fmt.Errorf("record %s[%d]@%d: bad %s header %q", r.Topic, r.Partition, r.Offset, headerGeneration, gen)
	}
	e.Generation = g
	return e, nil
}
