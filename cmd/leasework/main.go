// Command leasework is the operator's tool for a leasework events table: it
// creates or upgrades the schema, prints the table's figures, lists rows with
// their last error and the keys held by a FAILED event, sends FAILED rows back
// to READY, and discards the ones an operator gives up on (releasing their
// key).
//
// Usage:
//
//	leasework <command> [flags]
//
// The commands are migrate, stats, list, requeue, discard, explain and help.
// Every command reads the database from -dsn or $LEASEWORK_DSN; it never
// starts a server of its own. Output is an aligned table, or JSON with -json.
//
// # Exit status
//
//   - 0: success. A requeue that matched no row is a success too: it prints
//     "requeued 0 rows" (with -json, "count": 0).
//   - 1: a runtime or database error: the server is unreachable, the table
//     does not exist, a statement failed, the timeout passed.
//   - 2: a usage error: an unknown command or flag, a bad flag value, no
//     database given. Nothing was sent to the database.
//
// Run "leasework help" for the whole usage text.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
