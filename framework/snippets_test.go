//lint:file-ignore SA4006 some snippets leave errors unchecked, as their guides show them

package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters. The metrics snippet of
// docs/workers.md is in the root package's snippets_test.go instead: it
// imports expvar, which TestNothingRegisteredOnTheDefaultMux keeps out of
// this package's tests.
var _ = []any{startWorker, typedKind, requireTenant, importRows, runUntilSignalled,
	warnSlowHandlers, runReports, shipOrders, queuesAndPriorities, fulfilOrder, readSteps}

// startWorker is a service's worker (docs/workers.md): its table migrated
// at start-up, a handler with a backoff of its own, run until ctx ends.
func startWorker(ctx context.Context, db *sql.DB, publish func(context.Context, *leasework.Claim) error) error {
	w, err := framework.New(db, lwpgx.New(), framework.Config{Concurrency: 20})
	if err != nil {
		return err
	}
	if _, err := w.Store().Migrate(ctx); err != nil {
		return err
	}
	err = w.Register("order.placed", leasework.HandlerFunc(publish), framework.RetryPolicy{
		InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Minute,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx) // blocks; when ctx ends: stop claiming, grace period, cancel, release, return
}

// Email is the arguments of the typed kind of docs/workers.md.
type Email struct {
	To string `json:"to"`
}

// typedKind declares a kind, enqueues it and handles it (docs/workers.md,
// "Typed kinds").
func typedKind(ctx context.Context, store *lease.Store, tx *sql.Tx, w *framework.Worker, send func(context.Context, Email) error) (err error) {
	var SendEmail = lease.Kind[Email]{Name: "email.send", Queue: "mail", Priority: 1, MaxAttempts: 5}

	_, err = SendEmail.Enqueue(ctx, store, tx, Email{To: "ada@example.com"}) // producer

	err = framework.HandleKind(w, SendEmail, func(ctx context.Context, c *leasework.Claim, m Email) error {
		return send(ctx, m)
	}, framework.KindOptions{Policy: framework.RetryPolicy{MaxAttempts: 5}, Timeout: 30 * time.Second})
	return err
}

// requireTenant is middleware around every handler (docs/workers.md,
// "Middleware").
func requireTenant(w *framework.Worker) (err error) {
	err = w.Use(func(next leasework.Handler) leasework.Handler {
		return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			if c.Metadata["tenant"] == "" {
				return leasework.Permanent(errors.New("no tenant"))
			}
			return next.Handle(ctx, c)
		})
	})
	return err
}

// importRows is a long job that resumes where an earlier attempt got to
// (docs/workers.md, "Progress").
func importRows(ctx context.Context, c *leasework.Claim, rows []string, parseRow func([]byte) int, load func(context.Context, string) error) error {
	start := parseRow(c.Progress) // nil on the first attempt
	for i := start; i < len(rows); i++ {
		if err := load(ctx, rows[i]); err != nil {
			return err
		}
		if err := framework.RecordProgress(ctx, []byte(strconv.Itoa(i+1))); err != nil {
			return err // ErrLeaseLost: the claim is someone else's now
		}
	}
	return nil
}

// runUntilSignalled stops the worker on SIGINT or SIGTERM
// (docs/workers.md, "Stopping").
func runUntilSignalled(w *framework.Worker) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return w.Run(ctx) // returns at most GracePeriod + StopTimeout after SIGTERM
}

// warnSlowHandlers is an observer (docs/workers.md, "Observers").
func warnSlowHandlers(w *framework.Worker) (err error) {
	err = w.Observe(framework.Observer{
		HandlerReturned: func(ctx context.Context, c *leasework.Claim, info framework.HandlerInfo) {
			if info.Ran > time.Minute {
				slog.WarnContext(ctx, "slow handler", "kind", c.Kind, "event", c.EventID, "ran", info.Ran)
			}
		},
	})
	return err
}

// runReports runs a worker with a schedule (docs/schedules.md).
func runReports(ctx context.Context, w *framework.Worker) (err error) {
	err = w.Schedule(framework.Periodic{
		Name:     "nightly-report",
		Schedule: "0 3 * * *", // 3am UTC; "TZ=Europe/Paris 0 3 * * *", "@hourly", "@every 5m"
		Kind:     "report.nightly",
		Payload:  []byte(`{"format":"pdf"}`),
	})
	if err != nil {
		return err // a bad spec, kind, queue or priority, naming the field
	}
	return w.Run(ctx)
}

// shipOrders registers a handler that completes in its own transaction
// (docs/transactional.md).
func shipOrders(w *framework.Worker) (err error) {
	err = w.Register("order.placed", framework.Transactional(
		func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
			_, err := tx.ExecContext(ctx,
				`INSERT INTO shipments (order_id, event_id) VALUES ($1, $2)`, c.Key, c.EventID)
			return err // nil: the worker completes the claim in tx, then commits
		}), framework.RetryPolicy{})
	return err
}

// queuesAndPriorities enqueues into queues at priorities, and makes a
// worker that serves them (docs/queues.md).
func queuesAndPriorities(ctx context.Context, db *sql.DB, store *lease.Store, tx *sql.Tx, reset, digest, params []byte) (*framework.Worker, error) {
	var err error
	_, err = store.Enqueue(ctx, tx,
		lease.Event{Kind: "email", Queue: "mail", Payload: reset},               // priority 0
		lease.Event{Kind: "email", Queue: "mail", Priority: 5, Payload: digest}, // after every due 0..4
		lease.Event{Kind: "report", Queue: "bulk", Payload: params},
	)

	w, err := framework.New(db, lwpgx.New(), framework.Config{
		Queues: []framework.Queue{{Name: "mail", Concurrency: 200}, {Name: "bulk", Concurrency: 4}},
	})
	return w, err
}

// Order is the arguments of the order.fulfil kind of docs/steps.md.
type Order struct {
	ID    string `json:"id"`
	SKU   string `json:"sku"`
	Cents int64  `json:"cents"`
}

// fulfilOrder is a handler made of steps (docs/steps.md): a reservation
// in the queue's database, then a charge and a shipment by other
// services, each resumed from its record on a later attempt.
func fulfilOrder(ctx context.Context, c *leasework.Claim, o Order, db *sql.DB,
	charge func(ctx context.Context, idempotencyKey string, cents int64) (string, error),
	ship func(ctx context.Context, idempotencyKey string, reservation int64) (string, error)) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	reservation, err := framework.StepTx(ctx, tx, "reserve", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var id int64
		err := tx.QueryRowContext(ctx,
			`INSERT INTO reservations (order_id, sku) VALUES ($1, $2) RETURNING id`, o.ID, o.SKU).Scan(&id)
		return id, err
	})
	if err != nil {
		return err // ErrLeaseLost: tx is rolled back, and the reservation with it
	}
	if err := tx.Commit(); err != nil { // the row is locked until then: commit well within the lease
		return err
	}

	// Other services: at least once per step, so each call carries a key
	// that makes a repeat harmless.
	chargeID, err := framework.Step(ctx, "charge", func(ctx context.Context) (string, error) {
		return charge(ctx, c.EventID+"/charge", o.Cents)
	})
	if err != nil {
		return err
	}
	tracking, err := framework.Step(ctx, "ship", func(ctx context.Context) (string, error) {
		return ship(ctx, c.EventID+"/ship", reservation)
	})
	if err != nil {
		return err // retried: the next attempt gets reserve and charge back, and ships
	}
	return framework.RecordOutput(ctx, []byte(chargeID+" "+tracking))
}

// readSteps reads what an event's handler recorded (docs/steps.md).
func readSteps(ctx context.Context, store *lease.Store) (err error) {
	row, err := store.GetByEventID(ctx, "order-42-fulfil") // or Get; List leaves them out
	for _, st := range row.Steps {                         // in the order recorded
		_ = fmt.Sprintf("%s: %s (generation %d, at %s)", st.Name, st.Value, st.Generation, st.At)
	}
	_ = row.Output // what RecordOutput last recorded, or nil
	return err
}
