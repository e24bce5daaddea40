package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// errCardDeclined is the payment provider's permanent refusal: calling
// again with the same card gets the same answer.
var errCardDeclined = errors.New("card declined")

// provider stands in for a payment service in another system. Its table
// is in the example's database only to keep the example self-contained:
// the handler calls it outside any transaction of its own, and each call's
// effect commits on its own, as a remote call's would. So a handler that
// dies after the provider charged and before the step was recorded calls
// it again.
//
// Like real payment APIs, it takes an idempotency key: a call with a key it
// has seen charges nothing and answers what the first call did (the same
// charge, or the same decline). The key is the event id and the step's
// name, stable across the event's attempts.
type provider struct {
	db       *sql.DB
	payments string
}

// Charge is the result of a successful charge: the charge step's recorded
// result (exported fields: steps are encoded with encoding/json).
type Charge struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
	Calls int    `json:"calls"` // calls the provider had seen with the key, this one included
}

// charge charges o's card, once per key.
func (p *provider) charge(ctx context.Context, key string, o Order) (Charge, error) {
	outcome := "charged"
	if o.Card == cardDeclined {
		outcome = "declined"
	}
	var id int64
	var answer string
	var calls int
	// The first call with a key inserts the payment; a repeat only counts
	// the call and reads the first call's outcome back.
	err := p.db.QueryRowContext(ctx, `INSERT INTO `+p.payments+` AS p (idempotency_key, order_id, amount_cents, outcome)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (idempotency_key) DO UPDATE SET calls = p.calls + 1
		RETURNING p.id, p.outcome, p.calls`, key, o.ID, o.Cents, outcome).Scan(&id, &answer, &calls)
	if err != nil {
		return Charge{}, fmt.Errorf("payment provider: %w", err)
	}
	if answer == "declined" {
		return Charge{}, fmt.Errorf("payment provider: key %s: %w", key, errCardDeclined)
	}
	return Charge{ID: fmt.Sprintf("ch_%d", id), Cents: o.Cents, Calls: calls}, nil
}
