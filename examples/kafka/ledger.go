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
//
// The ledger also checks order: each customer's line keeps the Seq of the
// last order applied (last_seq), and an order is in order when its Seq is
// last_seq + 1. The inbox row records the last_seq it followed (prev_seq),
// so that anyone can check afterwards that every customer's orders were
// applied 1, 2, 3, ... An order out of order is still applied (a total does
// not depend on order) and reported; with the relay's order per key and one
// consumer per partition, it does not happen.

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
		`ALTER TABLE ` + l.inbox + ` ADD COLUMN IF NOT EXISTS customer text`,
		`ALTER TABLE ` + l.inbox + ` ADD COLUMN IF NOT EXISTS seq bigint`,
		`ALTER TABLE ` + l.inbox + ` ADD COLUMN IF NOT EXISTS prev_seq bigint`,
		`CREATE TABLE IF NOT EXISTS ` + l.totals + ` (
			customer     text PRIMARY KEY,
			orders       bigint NOT NULL,
			amount_cents bigint NOT NULL)`,
		`ALTER TABLE ` + l.totals + ` ADD COLUMN IF NOT EXISTS last_seq bigint NOT NULL DEFAULT 0`,
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

// applied is what applyOrder did with one delivery.
type applied int

const (
	appliedInOrder    applied = iota + 1 // first delivery, Seq = the customer's last Seq + 1
	appliedOutOfOrder                    // first delivery, but not the customer's next Seq
	alreadyApplied                       // a redelivery: nothing changed
)

// applyOrder adds an order to its customer's totals, once per event id, and
// reports whether it came in its customer's order. It changes nothing, and
// reports alreadyApplied, when the event was applied before.
func (l *ledger) applyOrder(ctx context.Context, e envelope, at where, o order) (applied, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("ledger: apply %s: %w", e.EventID, err)
	}
	defer tx.Rollback() // a no-op after Commit
	// A concurrent transaction inserting the same event id makes this one
	// wait for it, then do nothing if it committed.
	res, err := tx.ExecContext(ctx, `INSERT INTO `+l.inbox+` (event_id, generation, topic, partition, record_offset, customer, seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (event_id) DO NOTHING`,
		e.EventID, e.Generation, at.Topic, at.Partition, at.Offset, o.Customer, o.Seq)
	if err != nil {
		return 0, fmt.Errorf("ledger: apply %s: inbox: %w", e.EventID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: inbox: %w", e.EventID, err)
	} else if n == 0 {
		return alreadyApplied, nil // a redelivery: the effect is already in
	}
	// The customer's line, locked until commit, so that two deliveries of
	// one customer's events apply one after the other.
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.totals+` (customer, orders, amount_cents, last_seq)
		VALUES ($1, 0, 0, 0) ON CONFLICT (customer) DO NOTHING`, o.Customer); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: totals: %w", e.EventID, err)
	}
	var prev int64
	if err := tx.QueryRowContext(ctx, `SELECT last_seq FROM `+l.totals+` WHERE customer = $1 FOR UPDATE`,
		o.Customer).Scan(&prev); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: totals: %w", e.EventID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+l.totals+`
		SET orders = orders + 1, amount_cents = amount_cents + $2, last_seq = greatest(last_seq, $3)
		WHERE customer = $1`, o.Customer, o.AmountCents, o.Seq); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: totals: %w", e.EventID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+l.inbox+` SET prev_seq = $2 WHERE event_id = $1`, e.EventID, prev); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: inbox: %w", e.EventID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("ledger: apply %s: commit: %w", e.EventID, err)
	}
	if o.Seq != prev+1 {
		return appliedOutOfOrder, nil
	}
	return appliedInOrder, nil
}

// total is one customer's line in the ledger.
type total struct {
	Customer    string
	Orders      int64
	AmountCents int64
	LastSeq     int64 // the highest Seq applied
}

// totalFor returns a customer's totals; zero when the customer has none.
func (l *ledger) totalFor(ctx context.Context, customer string) (total, error) {
	t := total{Customer: customer}
	err := l.db.QueryRowContext(ctx, `SELECT orders, amount_cents, last_seq FROM `+l.totals+` WHERE customer = $1`, customer).
		Scan(&t.Orders, &t.AmountCents, &t.LastSeq)
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

// inboxEntry is one applied event as the inbox recorded it.
type inboxEntry struct {
	EventID    string
	Generation int64
	Seq        int64 // the order's Seq
	PrevSeq    int64 // its customer's last Seq when it was applied
}

// appliedOf returns the inbox entries of a customer's events, in Seq order.
// The customer's events were applied in order, each once, exactly when the
// entries' Seqs are 1, 2, ..., n and each PrevSeq is its Seq - 1.
func (l *ledger) appliedOf(ctx context.Context, customer string) ([]inboxEntry, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT event_id, generation, seq, prev_seq FROM `+l.inbox+`
		WHERE customer = $1 ORDER BY seq, event_id`, customer)
	if err != nil {
		return nil, fmt.Errorf("ledger: read inbox of %s: %w", customer, err)
	}
	defer rows.Close()
	var out []inboxEntry
	for rows.Next() {
		var e inboxEntry
		if err := rows.Scan(&e.EventID, &e.Generation, &e.Seq, &e.PrevSeq); err != nil {
			return nil, fmt.Errorf("ledger: read inbox of %s: %w", customer, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read inbox of %s: %w", customer, err)
	}
	return out, nil
}
