package leaseworkotel_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/leasework/leasework"
	leaseworkotel "github.com/leasework/leasework/contrib/otel"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters.
var _ = []any{instrumented}

// instrumented makes a store whose enqueues are traced and starts a worker
// whose claims are (docs/opentelemetry.md).
func instrumented(ctx context.Context, db *sql.DB, drv leasework.Driver) (*lease.Store, error) {
	store, err := lease.New(db, drv, lease.Options{
		EnqueueMiddleware: []lease.EnqueueMiddleware{leaseworkotel.EnqueueMiddleware()},
	})
	if err != nil {
		return nil, err
	}
	w, err := framework.New(db, drv, framework.Config{})
	if err != nil {
		return nil, err
	}
	if err := leaseworkotel.Instrument(w); err != nil { // before w.Run
		log.Fatal(err)
	}
	go w.Run(ctx)
	return store, nil
}
