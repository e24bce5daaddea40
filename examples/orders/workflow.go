package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

// workflow is the "order.placed" handler: reserve the stock, charge the
// card, ship; each a named step, recorded with the event's row, so that an
// attempt after a crash, a lost lease or a retry resumes after the last
// step that finished. A card the provider declines makes it release the
// reservation (a compensating step) and fail the event for good.
//
// reserve, ship and release write in the queue's database: each is a
// framework.StepTx in a transaction of its own, its writes and its record
// committed together, so it is applied once whatever happens. charge calls
// a service outside that database: a framework.Step, whose effect and
// record are two writes, so it may run twice across a crash between them;
// the idempotency key makes the second call charge nothing.
type workflow struct {
	db  *sql.DB
	t   tables
	pay *provider

	// note reports what the handler does, for the demonstration's output.
	// Nil reports nothing.
	note func(c *leasework.Claim, o Order, format string, args ...any)
	// pause is the demonstration's hook for killing the worker between
	// steps: the handler calls it at each point, and in the worker process
	// it blocks at the point chosen for the order until the process is
	// killed. Nil never blocks.
	pause func(ctx context.Context, c *leasework.Claim, o Order, at point) error
}

// The results the steps record (encoded with encoding/json: exported
// fields) and hand back to later attempts.
type (
	Reservation struct {
		ID  int64  `json:"id"`
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	Shipment struct {
		ID       int64  `json:"id"`
		Tracking string `json:"tracking"`
	}
	Release struct {
		ID int64 `json:"id"`
	}
)

// point is a place between (or in) the steps, where the demonstration
// kills a worker.
type point string

const (
	afterReserve       point = "after reserve"
	chargedNotRecorded point = "after the provider charged, before charge was recorded"
	afterCharge        point = "after charge"
	afterShip          point = "after ship"
	afterRelease       point = "after release"
)

func newWorkflow(db *sql.DB, schema string) *workflow {
	t := tablesIn(schema)
	return &workflow{db: db, t: t, pay: &provider{db: db, payments: t.payments}}
}

// handle runs one attempt of an order's workflow.
func (wf *workflow) handle(ctx context.Context, c *leasework.Claim, o Order) error {
	res, err := stepInTx(ctx, wf.db, "reserve", func(ctx context.Context, tx *sql.Tx) (Reservation, error) {
		return wf.reserve(ctx, tx, c, o)
	})
	if err != nil {
		return err
	}
	wf.step(c, o, "reserve", fmt.Sprintf("reservation %d, %d x %s", res.ID, res.Qty, res.SKU))
	if err := wf.pauseAt(ctx, c, o, afterReserve); err != nil {
		return err
	}

	// The provider is another system: the key, stable across attempts,
	// makes a second call after a crash before the record harmless.
	key := c.EventID + "/charge"
	ch, err := framework.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
		ch, err := wf.pay.charge(ctx, key, o)
		if err != nil {
			return ch, err
		}
		if ch.Calls == 1 {
			wf.notef(c, o, "the provider charged %s, %s (call 1 with key %s)", ch.ID, money(ch.Cents), key)
		} else {
			wf.notef(c, o, "the provider answered %s again (call %d with key %s): the first call's charge, not a new one", ch.ID, ch.Calls, key)
		}
		return ch, wf.pauseAt(ctx, c, o, chargedNotRecorded)
	})
	if errors.Is(err, errCardDeclined) {
		return wf.compensate(ctx, c, o, res, err)
	}
	if err != nil {
		return err // retried: the next attempt gets the reservation back and charges
	}
	wf.step(c, o, "charge", ch.ID+", "+money(ch.Cents))
	if err := wf.pauseAt(ctx, c, o, afterCharge); err != nil {
		return err
	}

	sh, err := stepInTx(ctx, wf.db, "ship", func(ctx context.Context, tx *sql.Tx) (Shipment, error) {
		return wf.ship(ctx, tx, c, o, res, ch)
	})
	if err != nil {
		return err
	}
	wf.step(c, o, "ship", "shipment "+sh.Tracking)
	if err := wf.pauseAt(ctx, c, o, afterShip); err != nil {
		return err
	}

	out, _ := json.Marshal(map[string]any{"reservation": res.ID, "charge": ch.ID, "tracking": sh.Tracking})
	if err := framework.RecordOutput(ctx, out); err != nil {
		return err
	}
	wf.notef(c, o, "all three steps done: completing the event")
	return nil
}

// compensate releases the reservation of an order whose card was declined,
// as a step of its own, and fails the event for good. An attempt that dies
// before the release is recorded leaves the charge step unrecorded too (a
// decline records nothing): the next attempt asks the provider again, gets
// the same decline for the same key, and releases.
func (wf *workflow) compensate(ctx context.Context, c *leasework.Claim, o Order, res Reservation, declined error) error {
	wf.notef(c, o, "charge: %v; compensating", declined)
	rel, err := stepInTx(ctx, wf.db, "release", func(ctx context.Context, tx *sql.Tx) (Release, error) {
		return wf.release(ctx, tx, c, o, res)
	})
	if err != nil {
		return err
	}
	wf.step(c, o, "release", fmt.Sprintf("release %d of reservation %d", rel.ID, res.ID))
	if err := wf.pauseAt(ctx, c, o, afterRelease); err != nil {
		return err
	}
	out, _ := json.Marshal(map[string]any{"declined": declined.Error(), "released_reservation": res.ID})
	if err := framework.RecordOutput(ctx, out); err != nil {
		return err
	}
	wf.notef(c, o, "failing the event for good (leasework.Permanent)")
	return leasework.Permanent(declined)
}

// stepInTx runs fn as the step name in a transaction of its own, and
// commits it: fn's writes and the step's record commit together, or
// neither does. When an earlier attempt recorded the step, StepTx returns
// its result without running fn, and the transaction commits nothing.
func stepInTx[T any](ctx context.Context, db *sql.DB, name string, fn func(context.Context, *sql.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return zero, err
	}
	defer tx.Rollback()
	v, err := framework.StepTx(ctx, tx, name, fn)
	if err != nil {
		return zero, err // ErrLeaseLost among others: rolled back, fn's writes with it
	}
	// The event's row is locked until here: commit at once. A commit whose
	// outcome is unknown is safe: the next attempt finds the record exactly
	// when the writes are there.
	if err := tx.Commit(); err != nil {
		return zero, err
	}
	return v, nil
}

// reserve takes the order's quantity off the stock and records the
// reservation, in tx.
func (wf *workflow) reserve(ctx context.Context, tx *sql.Tx, c *leasework.Claim, o Order) (Reservation, error) {
	r, err := tx.ExecContext(ctx, `UPDATE `+wf.t.stock+` SET available = available - $2 WHERE sku = $1 AND available >= $2`, o.SKU, o.Qty)
	if err != nil {
		return Reservation{}, err
	}
	if n, err := r.RowsAffected(); err != nil {
		return Reservation{}, err
	} else if n != 1 {
		return Reservation{}, leasework.Permanent(fmt.Errorf("out of stock: %d x %s", o.Qty, o.SKU))
	}
	res := Reservation{SKU: o.SKU, Qty: o.Qty}
	err = tx.QueryRowContext(ctx, `INSERT INTO `+wf.t.reservations+` (order_id, sku, qty, event_id, generation)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, o.ID, o.SKU, o.Qty, c.EventID, c.Generation).Scan(&res.ID)
	return res, err
}

// ship records the shipment of a reserved and charged order, in tx.
func (wf *workflow) ship(ctx context.Context, tx *sql.Tx, c *leasework.Claim, o Order, res Reservation, ch Charge) (Shipment, error) {
	var sh Shipment
	err := tx.QueryRowContext(ctx, `INSERT INTO `+wf.t.shipments+` (order_id, reservation_id, charge_id, event_id, generation)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, o.ID, res.ID, ch.ID, c.EventID, c.Generation).Scan(&sh.ID)
	sh.Tracking = fmt.Sprintf("TRK-%s-%d", o.ID, sh.ID)
	return sh, err
}

// release gives the reservation's quantity back to the stock and records
// the release, in tx.
func (wf *workflow) release(ctx context.Context, tx *sql.Tx, c *leasework.Claim, o Order, res Reservation) (Release, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE `+wf.t.stock+` SET available = available + $2 WHERE sku = $1`, res.SKU, res.Qty); err != nil {
		return Release{}, err
	}
	var rel Release
	err := tx.QueryRowContext(ctx, `INSERT INTO `+wf.t.releases+` (order_id, reservation_id, event_id, generation)
		VALUES ($1, $2, $3, $4) RETURNING id`, o.ID, res.ID, c.EventID, c.Generation).Scan(&rel.ID)
	return rel, err
}

// step reports a step that returned: run by this attempt, or handed back
// from an earlier attempt's record (the claim carries the records).
func (wf *workflow) step(c *leasework.Claim, o Order, name, result string) {
	if _, recorded := c.Steps[name]; recorded {
		wf.notef(c, o, "%s recorded by an earlier attempt, not run again: %s", name, result)
		return
	}
	wf.notef(c, o, "%s ran and was recorded: %s", name, result)
}

func (wf *workflow) notef(c *leasework.Claim, o Order, format string, args ...any) {
	if wf.note != nil {
		wf.note(c, o, format, args...)
	}
}

func (wf *workflow) pauseAt(ctx context.Context, c *leasework.Claim, o Order, at point) error {
	if wf.pause == nil {
		return nil
	}
	return wf.pause(ctx, c, o, at)
}
