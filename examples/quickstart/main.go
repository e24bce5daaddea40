// Command quickstart enqueues three events in its own transaction and
// handles them with a leasework worker, then stops.
//
//	go run ./examples/quickstart -dsn 'postgres://user:pass@localhost:5432/db'
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// OrderPlaced is the payload of an order.placed event, as JSON.
type OrderPlaced struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
}

// orderPlaced is declared once, for the code that enqueues and the worker.
var orderPlaced = lease.Kind[OrderPlaced]{Name: "order.placed"}

func main() {
	dsn := flag.String("dsn", os.Getenv("LEASEWORK_DSN"), "PostgreSQL URL (default $LEASEWORK_DSN)")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("quickstart: no database: pass -dsn or set LEASEWORK_DSN")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dsn); err != nil {
		log.Fatal("quickstart: ", err)
	}
}

func run(ctx context.Context, dsn string) error {
	db, err := lwpgx.New().Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := framework.New(db, lwpgx.New(), framework.Config{}) // table leasework.events
	if err != nil {
		return err
	}
	if _, err := w.Store().Migrate(ctx); err != nil { // safe to run every start
		return err
	}

	// The events commit with your business writes in tx, or not at all.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var events []lease.Event
	for _, o := range []OrderPlaced{{"1001", "ada"}, {"1002", "ada"}, {"1003", "grace"}} {
		e, err := orderPlaced.Event(o)
		if err != nil {
			return err
		}
		e.EventID = "order-" + o.Order + "-placed" // stable: the same order, the same id
		e.Key = "customer-" + o.Customer           // a customer's events run one at a time, in order
		events = append(events, e)
	}
	enqueued, err := w.Store().EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true}, events...)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	var todo int64
	for _, e := range enqueued {
		if !e.Duplicate {
			todo++
		}
	}
	if todo == 0 {
		log.Print("every event id is taken (enqueued by an earlier run, kept 24h): nothing to do")
		return nil
	}

	ctx, done := context.WithCancel(ctx)
	defer done()
	var handled atomic.Int64
	err = framework.HandleKind(w, orderPlaced, func(ctx context.Context, c *leasework.Claim, o OrderPlaced) error {
		log.Printf("order %s of %s: event %s, key %s, attempt %d, generation %d",
			o.Order, o.Customer, c.EventID, c.Key, c.Attempt, c.Generation)
		if handled.Add(1) == todo {
			done() // the last one: stop gracefully; its completion is still written
		}
		return nil
	}, framework.KindOptions{})
	if err != nil {
		return err
	}
	if err := w.Run(ctx); err != nil { // until ctx ends, then a graceful stop
		return err
	}
	log.Printf("completed %d events", w.Counters().Completed)
	return nil
}
