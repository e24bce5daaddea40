package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasework/leasework/lease"
)

// The example's application, consumer side: a ledger of customer totals fed
// by "order.placed" events. It shares the shop's database here to keep the
// example small; in a real system these tables live in the consumer's own
// database, and the same transaction pattern applies there.
//
// Adding an order to a total is not idempotent, and the relay delivers at
// least once. The inbox makes the effect happen once: each event is applied
// in a transaction that first inserts the event id into the inbox, and a
// redelivered event finds its id there and changes nothing.

// ledger owns the inbox and customer_totals tables.
type ledger struct {
	db            *sql.DB
	inbox, totals string // quoted, schema-qualified
}

func newLedger(db *sql.DB, schema string) *ledger {
	q := lease.QuoteIdent(schema)
	return &ledger{db: db, inbox: q + ".inbox", totals: q + ".customer_totals"}
}

func (l *ledger) migrate(ctx context.Context) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ` + l.inbox + ` (
			event_id      text PRIMARY KEY,
			generation    bigint NOT NULL,
			topic         text NOT NULL,
			partition     integer NOT NULL,
			record_offset bigint NOT NULL,
			applied_at    timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE IF NOT EXISTS ` + l.totals + ` (
			customer     text PRIMARY KEY,
			orders       bigint NOT NULL,
			amount_cents bigint NOT NULL)`,
	} {
		if _, err := l.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("ledger: migrate: %w", err)
		}
	}
	return nil
}

// where is the record an event was applied from, for the inbox.
type where struct {
	Topic     string
	Partition int32
	Offset    int64
}

// applyOrder adds an order to its customer's totals, once per event id. It
// reports false, and changes nothing, when the event was applied before.
func (l *ledger) applyOrder(ctx context.Context, e envelope, at where, o order) (applied bool, err error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("ledger: apply %s: %w", e.EventID, err)
	}
	defer tx.Rollback() // a no-op after Commit
	// A concurrent transaction inserting the same event id makes this one
	// wait for it, then do nothing if it committed.
	res, err := tx.ExecContext(ctx, `INSERT INTO `+l.inbox+` (event_id, generation, topic, partition, record_offset)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (event_id) DO NOTHING`,
		e.EventID, e.Generation, at.Topic, at.Partition, at.Offset)
	if err != nil {
		return false, fmt.Errorf("ledger: apply %s: inbox: %w", e.EventID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("ledger: apply %s: inbox: %w", e.EventID, err)
	} else if n == 0 {
		return false, nil // a redelivery: the effect is already in
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.totals+` AS t (customer, orders, amount_cents) VALUES ($1, 1, $2)
		ON CONFLICT (customer) DO UPDATE SET orders = t.orders + 1, amount_cents = t.amount_cents + EXCLUDED.amount_cents`,
		o.Customer, o.AmountCents); err != nil {
		return false, fmt.Errorf("ledger: apply %s: totals: %w", e.EventID, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("ledger: apply %s: commit: %w", e.EventID, err)
	}
	return true, nil
}

// total is one customer's line in the ledger.
type total struct {
	Customer    string
	Orders      int64
	AmountCents int64
}

// totalFor returns a customer's totals; zero when the customer has none.
func (l *ledger) totalFor(ctx context.Context, customer string) (total, error) {
	t := total{Customer: customer}
	err := l.db.QueryRowContext(ctx, `SELECT orders, amount_cents FROM `+l.totals+` WHERE customer = $1`, customer).
		Scan(&t.Orders, &t.AmountCents)
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return total{}, fmt.Errorf("ledger: totals of %s: %w", customer, err)
	}
	return t, nil
}

// inboxed returns the generation each of eventIDs was applied with; an event
// not yet applied is absent.
func (l *ledger) inboxed(ctx context.Context, eventIDs []string) (map[string]int64, error) {
	out := make(map[string]int64, len(eventIDs))
	for _, id := range eventIDs {
		var gen int64
		err := l.db.QueryRowContext(ctx, `SELECT generation FROM `+l.inbox+` WHERE event_id = $1`, id).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: read inbox: %w", err)
		}
		out[id] = gen
	}
	return out, nil
}
