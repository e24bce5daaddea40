// Package leaseworkotel traces and measures leasework with OpenTelemetry:
// a span for each enqueue, whose context travels with the event in its
// metadata, and under the same trace a span for each attempt of a
// worker, with spans for its claim and its outcome; counters of claims and
// outcomes and histograms of queue wait and run time, per kind and queue.
//
// It is a module of its own (github.com/leasework/leasework/contrib/otel),
// so that leasework's own module does not depend on OpenTelemetry. It uses
// the OpenTelemetry API only; the application chooses the SDK and the
// exporters.
//
// # Wiring
//
// The enqueuing side puts [EnqueueMiddleware] on its store, the working side
// puts an [Observer] on its worker ([Instrument] does it):
//
//	store, err := lease.New(db, drv, lease.Options{
//		EnqueueMiddleware: []lease.EnqueueMiddleware{leaseworkotel.EnqueueMiddleware()},
//	})
//	...
//	w, err := framework.New(db, drv, framework.Config{})
//	...
//	err = leaseworkotel.Instrument(w) // before w.Run
//
// With no options, both use the global tracer provider, meter provider and
// propagator (see "Propagation"); [WithTracerProvider],
// [WithMeterProvider] and [WithPropagator] choose others. Events enqueued
// with the middleware under a context that carries a span (the request's)
// are handled in that span's trace.
//
// # Spans
//
// One enqueue call, of one event or many, is one span:
//
//	enqueue <kind>          producer; "enqueue" alone when the call has several kinds
//
// It is a child of the span in the enqueue's context, and ends when the
// enqueue returns, before the transaction commits (an event whose
// transaction rolls back has an enqueue span and no attempt). It has
// messaging.system ("leasework"), messaging.operation.type ("send"),
// leasework.event_count, leasework.kinds and leasework.queues (sorted,
// distinct), leasework.duplicates (events skipped as duplicates) and, when
// there is only one, leasework.kind, leasework.queue and
// messaging.destination.name, and leasework.event_id,
// messaging.message.id and leasework.id (the row id). An enqueue that
// fails records the error and has status Error.
//
// Each claim of an event is an attempt, traced as:
//
//	process <kind>          consumer: the attempt, from the claim statement to the outcome
//	├── claim               the claim statement that returned the claim (shared by a batch)
//	├── (the handler's own spans: its context carries the attempt span)
//	└── outcome             from the handler's return to the outcome's settlement
//
// Every one of them has leasework.event_id, leasework.kind,
// leasework.queue, leasework.generation, leasework.attempt and
// leasework.id, and messaging.system, messaging.destination.name (the
// queue) and messaging.message.id (the event id). The attempt span also
// has messaging.client.id (the worker's id, when the observer was added
// with [Instrument]), leasework.reclaimed, leasework.outcome (framework.Outcome.String():
// "completed", "retried", "snoozed", "failed", "released", "rejected",
// "abandoned") and, when the handler's context ended before it returned,
// leasework.cause (the cause's text: lease lost, cancelled, attempt timed
// out, shutting down); an event "handler returned" marks the handler's
// return. The claim span has leasework.queue_wait (seconds from due to
// claim; not for reclaims), the outcome span leasework.outcome.
//
// Status: the attempt span is an error when its handler returned an error
// (not a snooze: the error is recorded as an exception event), or when its
// outcome is failed, rejected (the claim was no longer owned, or the
// event was cancelled) or abandoned (the worker gave up writing it); the
// outcome span is an error for those three outcomes. Otherwise the status
// is left unset.
//
// # Parent or link
//
// By default the attempt span is a child of the enqueue span: a request,
// its enqueue and every attempt of its events are one trace, however many
// retries and reclaims. With [WithLinkToEnqueue] each attempt is instead
// the root of a trace of its own with one link to the enqueue span: better
// for events delayed by hours or days, or enqueued by the thousand in one
// call, where one trace would stretch too long or grow too large to read.
// An event without trace context in its metadata (enqueued without the
// middleware, or before it was added) gets a root attempt span, never one
// under a span that happens to be in the context given to Run.
//
// # Propagation
//
// The middleware writes the enqueue span's context into each event's
// metadata (lease.Event.Metadata, stored with the event) with a
// TextMapPropagator, and the observer reads it back from the claim's
// (leasework.Claim.Metadata). [WithPropagator] chooses the propagator;
// without it, the global one (otel.GetTextMapPropagator) is used if the
// application has set one, read at each enqueue and claim. OpenTelemetry's
// global propagator is a no-op until the application sets one, and with a
// no-op no trace would cross the queue: in that case both sides use W3C
// trace context and baggage (propagation.TraceContext and
// propagation.Baggage), so the keys stored are "traceparent",
// "tracestate" (when set) and "baggage" (when the context has any). The
// enqueuing and the working processes must use the same propagator; the
// baggage of the enqueuing context reaches the handler's.
//
// The middleware changes copies of the events and of their metadata maps,
// never the caller's. The keys the propagator writes replace what the
// caller gave for them; other keys are kept. An event whose metadata would
// then be larger than lease.MaxMetadataBytes is enqueued without the trace
// context (the enqueue span gets an event saying so) rather than failing.
//
// # Metrics
//
// All instruments of the observer have the attributes leasework.kind and
// leasework.queue.
// Counters count claims (unit "{claim}"): an outcome counter is added one
// when the claim's outcome settles as that outcome.
//
//	name                        type       unit     what it counts
//	leasework.claimed           counter    {claim}  claims taken
//	leasework.reclaimed         counter    {claim}  of those, claims of rows whose previous lease had expired
//	leasework.completed         counter    {claim}  outcomes: the event is done
//	leasework.retried           counter    {claim}  outcomes: the handler failed, the event runs again after a delay
//	leasework.snoozed           counter    {claim}  outcomes: the handler asked to run again later (leasework.Snooze)
//	leasework.failed            counter    {claim}  outcomes: the event is FAILED (permanent error, spent budget)
//	leasework.released          counter    {claim}  outcomes: given back unfinished by a stopping worker
//	leasework.stale_rejections  counter    {claim}  outcomes: rejected by the database, the claim no longer owned
//	leasework.abandoned         counter    {claim}  outcomes: the worker gave up writing one; the lease expires
//	leasework.lease_losses      counter    {claim}  handlers whose context ended because the claim was lost
//	leasework.queue_wait        histogram  s        from when the event was due to its claim
//	leasework.run_time          histogram  s        how long the handler ran, middleware included
//
// leasework.lease_losses counts the handlers whose context's cause, when
// they returned, matched leasework.ErrLeaseLost, as the worker's
// Counters.LeasesLost does; it has one more attribute, leasework.lease_loss:
// "lost" (the database rejected a renewal or progress write: the lease
// expired or another worker took the row), "unconfirmed"
// (leasework.ErrLeaseUnconfirmed: no renewal confirmed in time) or
// "cancelled" (leasework.ErrCancelled: the event was cancelled). A claim
// found lost only when its outcome is written (the handler had returned)
// is a stale rejection and not a lease loss; a handler that never returns
// is neither. The same claim may be counted as both: its handler is
// cancelled, and what it returns is rejected.
//
// leasework.queue_wait is recorded for every claim but reclaims (whose wait
// was a lease running out): from the event's due time (its run time, or
// its retry's, by the database clock) to the claim statement. Both
// histograms have bucket boundaries from 5ms to an hour.
//
// [Instrument] also observes the worker's claim statements that took rows
// and that a concurrency or rate limit kept from more (framework's
// Counters.ClaimsHeldBack), as leasework.claims_held_back, an observable
// counter of unit "{statement}" with the attribute messaging.client.id.
//
// [ObserveLimits] observes the concurrency limits of a store's table at
// each collection, read with lease.Store.Limits in one query, with the
// attributes leasework.table, leasework.limit.scope ("kind", "queue" or
// "partition") and leasework.limit.name (empty for the default limit of
// the partitions, whose figures are those of every partition under it):
//
//	name                        type   unit       what it measures
//	leasework.limit.live        gauge  {attempt}  attempts counted under the limit now
//	leasework.limit.max         gauge  {attempt}  the most live attempts it allows
//	leasework.limit.held_back   gauge  {event}    due READY events the full limit holds back; a partition's: its events set aside
//	leasework.limits.up         gauge  1          1 when the limits could be read, else 0 (leasework.table only)
//
// It observes the rate limits too, read with lease.Store.RateLimits in a
// second query, with leasework.limit.scope "kind", "queue" or "partition"
// (leasework.limit.name empty for the default rate limit of the
// partitions, whose recent starts are those of every partition under it,
// and whose max is each one's):
//
//	name                            type   unit     what it measures
//	leasework.rate_limit.recent     gauge  {start}  attempt starts counted in the window that ends now
//	leasework.rate_limit.max        gauge  {start}  the most starts it allows in any window of its period
//	leasework.rate_limit.held_back  gauge  {event}  a partition's rate limit only: its events set aside (WAITING)
//	leasework.rate_limits.up        gauge  1        1 when the rate limits could be read, else 0 (leasework.table only)
//
// And fair scheduling, read with lease.Store.Weights and
// lease.Store.Agings, with leasework.table and leasework.queue (and, for
// a weight, leasework.partition: "" for the queue's default):
//
//	name                              type   unit         what it measures
//	leasework.fair.partitions_active  gauge  {partition}  partitions of the fair queue its claims serve now
//	leasework.fair.weight             gauge  1            a partition's weight; partition "": the queue's default
//	leasework.priority_aging          gauge  s            how long a due event waits before it is claimed one level higher
//	leasework.fair.up                 gauge  1            1 when the weights and agings could be read, else 0 (leasework.table only)
//
// The figures are the table's, the same from every process: observe them
// in one.
//
// # What is not traced
//
// Renewals, progress writes and the batching of outcome writes are not
// spans; the worker's own Counters and Prometheus text cover them. A
// handler that has not returned when its worker stops has its attempt span
// ended with the outcome "abandoned"; nothing it does afterwards is
// recorded on that span.
package leaseworkotel
