// Command leasework is the operator's tool for a leasework events table: it
// creates or upgrades the schema, prints the table's figures, lists rows with
// their last error and the keys held by a FAILED event, shows one row and
// why it is not running, sends FAILED rows back
// to READY, discards the ones an operator gives up on (releasing their
// key), pauses and resumes queues, sets the concurrency limits of kinds,
// queues and partitions, the rate limits of kinds and queues, and the
// weights and priority aging of fair queues, and serves the operator
// console, a web UI for all of these.
//
// Usage:
//
//	leasework <command> [flags]
//
// The commands, as "leasework help" lists them:
//
//	migrate   create or upgrade the schema (safe to run again)
//	stats     rows per status, eligible rows, expired claims, oldest eligible age, held keys, paused queues
//	list      list rows by status and kind, with their last error; or the held keys; or one row, and why it is not running
//	requeue   move FAILED rows back to READY, due now
//	discard   give up on a FAILED row; its key's waiting events go on
//	cancel    end an unfinished event (DISCARDED); a running attempt is stopped first
//	queues    each queue with unfinished rows or paused: when paused, rows per status
//	pause     stop workers claiming from a queue; running handlers finish
//	resume    let workers claim from a paused queue again, at once
//	limits    each concurrency limit with its live attempts, each rate limit with its recent starts, each fair queue's weights; set, clear or audit one
//	ui        serve the operator console, a web UI, until interrupted; read-only unless -actions
//	version   this binary's version, its Go release and the schema version it migrates to
//	explain   show the claim's query plan: scans and rows it throws away
//	help      this text, or a command's flags: leasework help <command>
//
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
