package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// effects counts an order's rows in the example's tables.
type effects struct {
	Reserved, Charged, Declined, Shipped, Released int
}

// want is what every order must end with: each effect once, and for a
// declined card, no charge, no shipment, one release and a FAILED event.
func (o Order) want() (effects, leasework.Status) {
	if o.Card == cardDeclined {
		return effects{Reserved: 1, Declined: 1, Released: 1}, leasework.StatusFailed
	}
	return effects{Reserved: 1, Charged: 1, Shipped: 1}, leasework.StatusDone
}

// summarize reads each order's event (status, steps, output) and counts
// its effects in their tables, prints them, and returns an error wrapping
// errNotOnce when an order's differ from what it must end with.
func summarize(ctx context.Context, p *printer, store *lease.Store, t tables, orders []Order) error {
	var wrong []string
	p.printf("")
	p.printf("summary: the steps as recorded with each event (name, generation of the claim that recorded it), and the effects counted in their tables")
	for _, o := range orders {
		row, err := store.GetByEventID(ctx, o.eventID())
		if err != nil {
			return err
		}
		e, calls, err := countEffects(ctx, store, t, o.ID)
		if err != nil {
			return err
		}

		status := fmt.Sprintf("%s at generation %d", row.Status, row.Generation)
		if row.Status == leasework.StatusFailed {
			status += ": " + row.LastError
		}
		p.printf("  order %s (row %d)  %-8s %d x %-7s card %-13s %s", o.ID, row.ID, o.Customer, o.Qty, o.SKU, o.Card, status)
		var steps []string
		for _, st := range row.Steps {
			steps = append(steps, fmt.Sprintf("%s (generation %d)", st.Name, st.Generation))
		}
		p.printf("    steps:   %s", strings.Join(steps, ", "))
		charged := fmt.Sprintf("charged %d", e.Charged)
		if e.Declined > 0 {
			charged += fmt.Sprintf(" (declined %d)", e.Declined)
		}
		verdict := "each once"
		wantE, wantStatus := o.want()
		if e != wantE || row.Status != wantStatus {
			verdict = fmt.Sprintf("WRONG: want %+v, %s", wantE, wantStatus)
			wrong = append(wrong, o.ID)
		}
		p.printf("    effects: reserved %d, %s, shipped %d, released %d; the provider saw %s with the key: %s",
			e.Reserved, charged, e.Shipped, e.Released, plural(calls, "call"), verdict)
		if len(row.Output) > 0 {
			p.printf("    output:  %s", row.Output)
		}
	}

	stock, err := readStock(ctx, store, t)
	if err != nil {
		return err
	}
	want := stockAfter(orders)
	var line []string
	for _, sku := range slices.Sorted(maps.Keys(initialStock)) {
		line = append(line, fmt.Sprintf("%s %d -> %d", sku, initialStock[sku], stock[sku]))
	}
	verdict := "the shipped orders' quantities taken once, the declined one's given back"
	if !maps.Equal(stock, want) {
		verdict = fmt.Sprintf("WRONG: want %v", want)
		wrong = append(wrong, "stock")
	}
	p.printf("  stock: %s: %s", strings.Join(line, ", "), verdict)
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %s", errNotOnce, strings.Join(wrong, ", "))
	}
	return nil
}

// errNotOnce is summarize's verdict when an order's effects are not each
// applied once.
var errNotOnce = errors.New("an effect was not applied exactly once")

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// countEffects counts an order's rows in the effect tables, and the calls
// the provider saw with its key.
func countEffects(ctx context.Context, store *lease.Store, t tables, orderID string) (e effects, calls int, err error) {
	err = store.DB().QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM `+t.reservations+` WHERE order_id = $1),
		(SELECT count(*) FROM `+t.payments+` WHERE order_id = $1 AND outcome = 'charged'),
		(SELECT count(*) FROM `+t.payments+` WHERE order_id = $1 AND outcome = 'declined'),
		(SELECT coalesce(sum(calls), 0) FROM `+t.payments+` WHERE order_id = $1),
		(SELECT count(*) FROM `+t.shipments+` WHERE order_id = $1),
		(SELECT count(*) FROM `+t.releases+` WHERE order_id = $1)`, orderID).
		Scan(&e.Reserved, &e.Charged, &e.Declined, &calls, &e.Shipped, &e.Released)
	if err != nil {
		return e, 0, fmt.Errorf("count the effects of order %s: %w", orderID, err)
	}
	return e, calls, nil
}

func readStock(ctx context.Context, store *lease.Store, t tables) (map[string]int, error) {
	rows, err := store.DB().QueryContext(ctx, `SELECT sku, available FROM `+t.stock)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	stock := map[string]int{}
	for rows.Next() {
		var sku string
		var n int
		if err := rows.Scan(&sku, &n); err != nil {
			return nil, err
		}
		stock[sku] = n
	}
	return stock, rows.Err()
}

// stockAfter is the stock once every order shipped, or released its
// reservation.
func stockAfter(orders []Order) map[string]int {
	stock := maps.Clone(initialStock)
	for _, o := range orders {
		if o.Card != cardDeclined {
			stock[o.SKU] -= o.Qty
		}
	}
	return stock
}
