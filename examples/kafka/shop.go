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
//
// Seq is the order's place among its customer's orders: 1, 2, 3, ...,
// drawn by placeOrder in the order's transaction. The customer is the
// event's key, so the relay publishes one customer's events in the order
// their transactions committed, which is Seq order; the consumer checks it.
type order struct {
	ID          string `json:"order_id"`
	Customer    string `json:"customer"`
	Seq         int64  `json:"seq"`
	AmountCents int64  `json:"amount_cents"`
}

// eventID is the order's event id: stable, derived from the order, so that
// the consumer can recognise the event however often it is delivered.
func (o order) eventID() string { return "order-" + o.ID + "-placed" }

// shop owns the orders and customers tables, in the events table's schema.
type shop struct {
	db                *sql.DB
	store             *lease.Store
	orders, customers string // quoted, schema-qualified

	// keyless, for tests only, enqueues events without a key: no order is
	// then promised, which the order tests must notice.
	keyless bool
}

func newShop(store *lease.Store) *shop {
	q := lease.QuoteIdent(store.Schema())
	return &shop{db: store.DB(), store: store, orders: q + ".orders", customers: q + ".customers"}
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
	for _, stmt := range []string{
		`ALTER TABLE ` + s.orders + ` ADD COLUMN IF NOT EXISTS seq bigint`,
		`CREATE TABLE IF NOT EXISTS ` + s.customers + ` (
			id     text PRIMARY KEY,
			orders bigint NOT NULL)`,
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("shop: migrate: %w", err)
		}
	}
	return nil
}

// placeOrder writes the order and its event in one transaction: the
// transactional outbox. It returns the order as placed, with its Seq.
//
// The customer is the event's key: leasework hands one customer's events to
// the relay one at a time, in the order their transactions committed, and
// Kafka keeps one key's records in one partition. The transaction draws the
// order's Seq from the customer's row, which it holds locked until it
// commits, so one customer's orders commit in Seq order: Seq order is the
// order of the events on the topic.
func (s *shop) placeOrder(ctx context.Context, o order) (placed order, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return order{}, fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	defer tx.Rollback() // a no-op after Commit
	if err := tx.QueryRowContext(ctx, `INSERT INTO `+s.customers+` AS c (id, orders) VALUES ($1, 1)
		ON CONFLICT (id) DO UPDATE SET orders = c.orders + 1 RETURNING orders`, o.Customer).Scan(&o.Seq); err != nil {
		return order{}, fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.orders+` (id, customer, seq, amount_cents) VALUES ($1, $2, $3, $4)`,
		o.ID, o.Customer, o.Seq, o.AmountCents); err != nil {
		return order{}, fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	payload, err := json.Marshal(o)
	if err != nil {
		return order{}, fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	ev := lease.Event{EventID: o.eventID(), Kind: kindOrderPlaced, Key: o.Customer, Payload: payload}
	if s.keyless {
		ev.Key = ""
	}
	if _, err := s.store.Enqueue(ctx, tx, ev); err != nil {
		return order{}, fmt.Errorf("shop: place order %s: %w", o.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return order{}, fmt.Errorf("shop: place order %s: commit: %w", o.ID, err)
	}
	return o, nil
}
