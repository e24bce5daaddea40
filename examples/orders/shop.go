package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasework/leasework/lease"
)

// Order is an order as placed, and the payload of its "order.placed" event.
type Order struct {
	ID       string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Qty      int    `json:"qty"`
	Cents    int64  `json:"amount_cents"`
	Card     string `json:"card"` // a card token the payment provider knows
}

// eventID is the order's event id: stable across attempts, so that a step
// outside the database can build an idempotency key from it.
func (o Order) eventID() string { return "order-" + o.ID + "-placed" }

// orderPlaced is the kind, declared once for the code that enqueues and the
// worker.
var orderPlaced = lease.Kind[Order]{Name: "order.placed"}

// The card tokens of the simulated payment provider.
const (
	cardOK       = "tok_visa"
	cardDeclined = "tok_declined" // declined, every time: a permanent failure
)

// demoOrders are the orders the program places.
var demoOrders = []Order{
	{ID: "1001", Customer: "ada", SKU: "widget", Qty: 2, Cents: 2400, Card: cardOK},
	{ID: "1002", Customer: "grace", SKU: "gadget", Qty: 1, Cents: 1500, Card: cardOK},
	{ID: "1003", Customer: "linus", SKU: "gizmo", Qty: 1, Cents: 900, Card: cardDeclined},
	{ID: "1004", Customer: "barbara", SKU: "widget", Qty: 3, Cents: 3600, Card: cardOK},
}

// initialStock is what the warehouse holds before the orders.
var initialStock = map[string]int{"widget": 10, "gadget": 5, "gizmo": 3}

// tables are the example's tables, quoted and qualified with the schema of
// the events table: the effects live in the queue's database.
type tables struct {
	stock        string // sku, available: reserve takes, release gives back
	reservations string // one row per reservation made
	payments     string // the payment provider's side: one row per idempotency key
	shipments    string // one row per shipment made
	releases     string // one row per reservation released
}

func tablesIn(schema string) tables {
	q := lease.QuoteIdent(schema) + "."
	return tables{
		stock: q + "stock", reservations: q + "reservations", payments: q + "payments",
		shipments: q + "shipments", releases: q + "releases",
	}
}

// create creates the tables and stocks the warehouse. The effect tables
// have no unique constraint on the order on purpose: a step run twice would
// show as two rows, and the summary would count them.
func (t tables) create(ctx context.Context, db *sql.DB) error {
	for _, ddl := range []string{
		`CREATE TABLE ` + t.stock + ` (
			sku       text PRIMARY KEY,
			available int NOT NULL CHECK (available >= 0))`,
		`CREATE TABLE ` + t.reservations + ` (
			id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			order_id   text NOT NULL,
			sku        text NOT NULL,
			qty        int NOT NULL,
			event_id   text NOT NULL,
			generation bigint NOT NULL, -- the claim that made it
			at         timestamptz NOT NULL DEFAULT clock_timestamp())`,
		`CREATE TABLE ` + t.payments + ` (
			id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			idempotency_key text NOT NULL UNIQUE,
			order_id        text NOT NULL,
			amount_cents    bigint NOT NULL,
			outcome         text NOT NULL CHECK (outcome IN ('charged', 'declined')),
			calls           int NOT NULL DEFAULT 1, -- calls made with this key
			at              timestamptz NOT NULL DEFAULT clock_timestamp())`,
		`CREATE TABLE ` + t.shipments + ` (
			id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			order_id       text NOT NULL,
			reservation_id bigint NOT NULL,
			charge_id      text NOT NULL,
			event_id       text NOT NULL,
			generation     bigint NOT NULL,
			at             timestamptz NOT NULL DEFAULT clock_timestamp())`,
		`CREATE TABLE ` + t.releases + ` (
			id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			order_id       text NOT NULL,
			reservation_id bigint NOT NULL,
			event_id       text NOT NULL,
			generation     bigint NOT NULL,
			at             timestamptz NOT NULL DEFAULT clock_timestamp())`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("create the example's tables: %w", err)
		}
	}
	for sku, n := range initialStock {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+t.stock+` (sku, available) VALUES ($1, $2)`, sku, n); err != nil {
			return fmt.Errorf("stock %s: %w", sku, err)
		}
	}
	return nil
}

// placeOrders enqueues one "order.placed" event per order, in one
// transaction: in a shop, the transaction that records the orders.
func placeOrders(ctx context.Context, store *lease.Store, orders []Order) error {
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	events := make([]lease.Event, 0, len(orders))
	for _, o := range orders {
		e, err := orderPlaced.Event(o)
		if err != nil {
			return err
		}
		e.EventID = o.eventID()
		events = append(events, e)
	}
	if _, err := store.Enqueue(ctx, tx, events...); err != nil {
		return err
	}
	return tx.Commit()
}

// money formats cents as dollars.
func money(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }
