package leaseworkotel

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leasework/leasework"
)

// The attribute keys of the spans and metrics.
const (
	EventIDKey    = attribute.Key("leasework.event_id")    // the event's stable id (Claim.EventID)
	KindKey       = attribute.Key("leasework.kind")        // the event's kind
	QueueKey      = attribute.Key("leasework.queue")       // the queue it is claimed from; on fair scheduling's gauges, the queue
	GenerationKey = attribute.Key("leasework.generation")  // the claim's generation: the fencing token
	AttemptKey    = attribute.Key("leasework.attempt")     // the claim's attempt number, 1 for the first
	IDKey         = attribute.Key("leasework.id")          // the row id
	ReclaimedKey  = attribute.Key("leasework.reclaimed")   // the claim took over an expired lease
	QueueWaitKey  = attribute.Key("leasework.queue_wait")  // seconds from due to claim (claim spans of claims that were not reclaims)
	OutcomeKey    = attribute.Key("leasework.outcome")     // how the claim settled: framework.Outcome.String()
	CauseKey      = attribute.Key("leasework.cause")       // why the handler's context ended before it returned
	EventCountKey = attribute.Key("leasework.event_count") // events in one enqueue call
	KindsKey      = attribute.Key("leasework.kinds")       // the distinct kinds of one enqueue call, sorted
	QueuesKey     = attribute.Key("leasework.queues")      // the distinct queues of one enqueue call, sorted
	DuplicatesKey = attribute.Key("leasework.duplicates")  // events of one enqueue call skipped as duplicates
	LeaseLossKey  = attribute.Key("leasework.lease_loss")  // on leasework.lease_losses: "lost", "unconfirmed" or "cancelled"
	TableKey      = attribute.Key("leasework.table")       // on the limits' and fair scheduling's gauges: the events table, schema.table
	LimitScopeKey = attribute.Key("leasework.limit.scope") // on the limits' gauges: "kind", "queue" or "partition"; on the rate limits', "kind" or "queue"
	LimitNameKey  = attribute.Key("leasework.limit.name")  // on the limits' gauges: the kind's, the queue's or the partition's name; "" for the default limit of the partitions
	PartitionKey  = attribute.Key("leasework.partition")   // on leasework.fair.weight: the partition weighed; "" for the queue's default
)

// MessagingSystem is the value of messaging.system on every span.
const MessagingSystem = "leasework"

// messagingSystem is messaging.system on every span.
var messagingSystem = semconv.MessagingSystemKey.String(MessagingSystem)

// claimAttributes are the attributes of every span of one claim.
func claimAttributes(c *leasework.Claim) []attribute.KeyValue {
	return []attribute.KeyValue{
		EventIDKey.String(c.EventID),
		KindKey.String(c.Kind),
		QueueKey.String(c.Queue),
		GenerationKey.Int64(c.Generation),
		AttemptKey.Int(c.Attempt),
		IDKey.Int64(c.ID),
		messagingSystem,
		semconv.MessagingDestinationName(c.Queue),
		semconv.MessagingMessageID(c.EventID),
	}
}
