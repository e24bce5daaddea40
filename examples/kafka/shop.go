package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/leasework/leasework/lease"
)

// The example's application, producer side: a shop that records an order
// and, in the same transaction, an "order.placed" event in the leasework
// outbox. The order and its event commit together or not at all; the relay
// publishes the event afterwards.

const kindOrderPlaced = "order.placed"

// order is a placed order; it is also the payload of its event.
type order struct {
	ID          string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// eventID is the order's event id: stable, derived from the order, so that
// the consumer can recognise the event however often it is delivered.
func (o order) eventID() string { return "order-" + o.ID + "-placed" }

// shop owns the orders table, in the events table's schema.
type shop struct {
	db     *sql.DB
	store  *lease.Store
	orders string // quoted, schema-qualified
}

func newShop(store *lease.Store) *shop {
	return &shop{db: store.DB(), store: store, orders: lease.QuoteIdent(store.Schema()) + ".orders"}
}

func (s *shop) migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.orders+` (
		id           text PRIMARY KEY,
		customer     text NOT NULL,
		amount_cents bigint NOT NULL,
		placed_at    timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("shop: create orders table: %w", err)
	}
	return nil
}

// placeOrder writes the order and its event in one transaction: the
// transactional outbox. The customer is the event's key, so one customer's
// events go to one partition.
func (s *shop) placeOrder(ctx context.Context, o order) (eventID string, err error) {
	payload, err := json.Marshal(o)
	if err != nil {
		return "", fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.orders+` (id, customer, amount_cents) VALUES ($1, $2, $3)`,
		o.ID, o.Customer, o.AmountCents); err != nil {
		return "", fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	ev := lease.Event{EventID: o.eventID(), Kind: kindOrderPlaced, Key: o.Customer, Payload: payload}
	if _, err := s.store.Enqueue(ctx, tx, ev); err != nil {
		return "", fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("shop: place order %s: commit: %w", o.ID, err)
	}
	return ev.EventID, nil
}
