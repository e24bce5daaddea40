//lint:file-ignore SA4006 some snippets leave errors unchecked, as their guides show them

package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/lease"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters.
var _ = []any{storeRoundTrip, enqueueWithMetadata, enqueueUniqueInvoice, enqueueInKeyOrder, withdraw, enqueueOnce, completeInOwnTx, concurrencyLimits, whyNotRunning, partitionLimits, rateLimits, partitionRates, fairScheduling}

// storeRoundTrip is the store without a worker (docs/store.md): migrate,
// enqueue with the business write, claim, and record the outcomes.
func storeRoundTrip(ctx context.Context, db *sql.DB, body []byte) ([]lease.Result, error) {
	store, err := lease.New(db, lwpgx.New(), lease.Options{}) // schema "leasework", table "events"
	_, err = store.Migrate(ctx)                               // idempotent; safe from many processes

	tx, _ := db.BeginTx(ctx, nil)
	// ... your business write in tx ...
	_, err = store.Enqueue(ctx, tx, lease.Event{Kind: "order.placed", Key: "order-42", Payload: body})
	err = tx.Commit() // the event exists exactly when the business write does

	claims, err := store.Claim(ctx, lease.ClaimRequest{Limit: 100, Lease: 30 * time.Second})
	// ... handle each claim, then record the outcomes in one statement ...
	writes := make([]lease.Write, len(claims))
	for i, c := range claims {
		writes[i] = lease.Complete(c.Ref()) // or lease.Retry, lease.Fail, ...
	}
	results, err := store.WriteMany(ctx, writes...) // results[i].Verdict; results[i].Err: nil, or ErrLeaseLost
	return results, err
}

// enqueueWithMetadata enqueues an event with metadata (docs/store.md,
// "Enqueue").
func enqueueWithMetadata(ctx context.Context, store *lease.Store, tx *sql.Tx, body []byte, requestID string) (err error) {
	_, err = store.Enqueue(ctx, tx, lease.Event{
		Kind: "invoice.send", Payload: body,
		Metadata: map[string]string{"tenant": "acme", "request_id": requestID},
	})
	return err
}

// enqueueUniqueInvoice enqueues an invoice's mail at most once an hour
// (docs/store.md, "Unique events").
func enqueueUniqueInvoice(ctx context.Context, store *lease.Store, tx *sql.Tx, body []byte) (err error) {
	_, err = store.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{Kind: "invoice.send", Payload: body,
			Unique: &lease.Unique{ByArgs: true, ArgKeys: []string{"invoice"}, ByPeriod: time.Hour}})
	return err
}

// enqueueInKeyOrder enqueues two events of one key (docs/order-per-key.md).
func enqueueInKeyOrder(ctx context.Context, store *lease.Store, tx *sql.Tx) {
	// In one transaction or in several, committed one after another:
	store.Enqueue(ctx, tx, lease.Event{Kind: "order.placed", Key: "order-42"},
		lease.Event{Kind: "order.paid", Key: "order-42"})
	// order.paid is WAITING until order.placed is DONE.
}

// withdraw cancels an event, even one a worker runs (docs/workers.md,
// "Cancel from outside, fenced").
func withdraw(ctx context.Context, store *lease.Store, id int64) error {
	res, err := store.Cancel(ctx, id, "order withdrawn") // or: leasework cancel -id 42 -reason "order withdrawn"
	if err != nil {
		return err // lease.ErrNotFound, lease.ErrFinished
	}
	if res.Stopping {
		// a worker runs it: the event ends DISCARDED once that attempt has stopped
	}
	return nil
}

// enqueueOnce enqueues an event unless its id was enqueued before
// (docs/workers.md, "Retention and deduplication").
func enqueueOnce(ctx context.Context, store *lease.Store, tx *sql.Tx, body []byte) error {
	res, err := store.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
		lease.Event{EventID: "order-42-charge", Kind: "card.charge", Payload: body})
	if err != nil {
		return err
	}
	if res[0].Duplicate {
		// enqueued before, and perhaps handled already: nothing to do
	}
	return nil
}

// completeInOwnTx completes a claim in the transaction of its business
// writes, without the framework (docs/transactional.md).
func completeInOwnTx(ctx context.Context, store *lease.Store, tx *sql.Tx, claim leasework.Claim) error {
	// ... the business writes in tx ...
	if err := store.WriteTx(ctx, tx, lease.Complete(claim.Ref())); err != nil {
		return err // tx is already rolled back; errors.Is(err, leasework.ErrLeaseLost): not yours
	}
	return tx.Commit()
}

// partitionLimits declares limits per partition and enqueues an event of
// one (docs/flow-control.md).
func partitionLimits(ctx context.Context, store *lease.Store, tx *sql.Tx, payload []byte) error {
	// At most 2 attempts live per tenant, and one for acme, across every worker.
	_, err := store.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Max: 2}, "ops")
	_, err = store.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Name: "acme", Max: 1}, "ops: acme's API")

	// Inside the business transaction:
	_, err = store.Enqueue(ctx, tx, lease.Event{Kind: "invoice.send", Partition: "acme", Payload: payload})
	return err
}

// rateLimits declares, reads and clears a rate limit, and enqueues an
// event that costs more than one start (docs/flow-control.md).
func rateLimits(ctx context.Context, store *lease.Store, tx *sql.Tx, payload []byte) error {
	// At most 100 "sms.send" starts in any minute, across every worker.
	_, _, err := store.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopeKind, Name: "sms.send", Max: 100, Per: time.Minute}, "ops: provider quota")

	// A message to ten recipients takes ten of them.
	_, err = store.Enqueue(ctx, tx, lease.Event{Kind: "sms.send", Payload: payload, Cost: 10})

	rates, err := store.RateLimits(ctx) // each with Recent: the starts in the window that ends now
	for _, r := range rates {
		_ = fmt.Sprintf("%s %s: %d/%d per %v, next room at %v", r.Scope, r.Name, r.Recent, r.Max, r.Per, r.NextAt)
	}
	_, err = store.ClearRateLimit(ctx, lease.ScopeKind, "sms.send", "ops")
	return err
}

// partitionRates declares rate limits per partition, reads what they hold
// back, and clears one (docs/flow-control.md).
func partitionRates(ctx context.Context, store *lease.Store, tx *sql.Tx, payload []byte) error {
	// At most 10 starts per tenant in any minute, and 100 for acme, across every worker.
	_, _, err := store.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopePartition, Max: 10, Per: time.Minute}, "ops")
	_, _, err = store.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopePartition, Name: "acme", Max: 100, Per: time.Minute}, "ops: acme's plan")

	// Inside the business transaction:
	_, err = store.Enqueue(ctx, tx, lease.Event{Kind: "report.build", Partition: "acme", Payload: payload})

	rates, err := store.RateLimits(ctx) // those of the partitions after the others
	for _, r := range rates {
		if r.Scope == lease.ScopePartition {
			_ = fmt.Sprintf("partition %q: %d starts in the window, %d rows set aside", r.Name, r.Recent, r.HeldBack)
		}
	}
	_, err = store.ClearRateLimit(ctx, lease.ScopePartition, "acme", "ops") // acme falls under the default
	return err
}

// concurrencyLimits declares, reads and clears fleet-wide concurrency
// limits (docs/flow-control.md).
func concurrencyLimits(ctx context.Context, store *lease.Store) error {
	// At most 5 "invoice.send" attempts live at once, across every worker.
	_, err := store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "invoice.send", Max: 5}, "ops: rate of the mail provider")
	// At most 20 attempts of queue "bulk", of every kind.
	_, err = store.SetLimit(ctx, lease.Limit{Scope: lease.ScopeQueue, Name: "bulk", Max: 20}, "ops")

	limits, err := store.Limits(ctx) // each with Live: the attempts counted under it now
	for _, l := range limits {
		_ = fmt.Sprintf("%s %s: %d/%d live", l.Scope, l.Name, l.Live, l.Max)
	}
	changes, err := store.LimitChanges(ctx, 20) // who changed what, latest first
	_ = changes

	_, err = store.ClearLimit(ctx, lease.ScopeQueue, "bulk", "ops")
	return err
}

// whyNotRunning reads what the limits hold back, and why one event is not
// running (docs/flow-control.md).
func whyNotRunning(ctx context.Context, store *lease.Store, id int64) error {
	limits, err := store.Limits(ctx)
	for _, l := range limits {
		_ = fmt.Sprintf("%s %s: %d/%d live, %d due held back", l.Scope, l.Name, l.Live, l.Max, l.HeldBack)
	}
	reasons, err := store.WhyNotRunning(ctx, id) // empty: nothing holds it back
	for _, r := range reasons {
		// r.Kind: lease.ReasonLimit, ReasonPartition, ReasonRate, ReasonFair, ReasonPaused, ReasonKey or ReasonNotDue.
		_ = r.Text // "held by concurrency limit kind:send-email (5/5 live): it starts when one of those attempts ends, ..."
	}
	return err
}

// fairScheduling makes a queue fair across its tenants, with a heavier
// one, and ages its priorities (docs/flow-control.md).
func fairScheduling(ctx context.Context, store *lease.Store, tx *sql.Tx, body []byte) error {
	// Queue "reports" is fair: each partition (tenant) weighs 1 ...
	_, err := store.SetWeight(ctx, lease.Weight{Queue: "reports", Weight: 1}, "ops")
	// ... but acme, who pays for it, 3: three of its events to one of another's.
	_, err = store.SetWeight(ctx, lease.Weight{Queue: "reports", Partition: "acme", Weight: 3}, "ops")
	// A due event of priority 5 waiting over 10 minutes is claimed as priority 4.
	_, err = store.SetAging(ctx, "reports", 10*time.Minute, "ops")

	_, err = store.Enqueue(ctx, tx, lease.Event{Kind: "report.build", Queue: "reports", Partition: "acme", Priority: 5, Payload: body})
	return err
}
