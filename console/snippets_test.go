package console_test

import (
	"errors"
	"log"
	"log/slog"
	"net/http"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/lease"
)

// This file holds the code of guide snippets (docs/*.md) that no example
// shows, compiled and never called; docs_test.go in the module's root
// checks each snippet against its function. The names a snippet takes as
// given are the function's parameters.
var _ = []any{mountWithActions}

// mountWithActions mounts a console whose actions only the on-call
// engineer may take (docs/console.md).
func mountWithActions(store *lease.Store, mux *http.ServeMux, logger *slog.Logger, isOnCall func(*http.Request) bool) {
	c, err := console.New(store, console.Options{
		Actions: true, // default false: read-only
		Authorize: func(r *http.Request, a console.Action) error {
			if a.Name != console.ActionView && !isOnCall(r) {
				return errors.New("only the on-call engineer may change events")
			}
			return nil
		},
		Logger: logger, // one line per action taken or refused; nil: quiet
	})
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("/leasework/", http.StripPrefix("/leasework", c))
}
