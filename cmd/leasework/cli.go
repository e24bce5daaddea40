package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

// Exit codes. Scripts may rely on them; the usage text documents them.
const (
	exitOK    = 0 // success, including a requeue that matched no row
	exitError = 1 // runtime or database error
	exitUsage = 2 // bad command, flag or value; nothing was sent to the database
)

// action is one subcommand: it registers its own flags, checks their values
// before any connection is made, and then runs against the store.
type action interface {
	flags(fs *flag.FlagSet)
	check() error
	exec(ctx context.Context, st *lease.Store, out *printer) error
}

// servingAction is an action that serves until it is interrupted (ui):
// -timeout bounds each of its requests instead of the whole run.
type servingAction interface {
	setTimeout(d time.Duration)
}

// offlineAction is an action that, as its flags ask, runs without a
// database (migrate -print).
type offlineAction interface {
	offline() bool
	execOffline(opts lease.Options, out *printer) error
}

type command struct {
	name     string
	synopsis string // the command's own flags, for the usage line
	summary  string // one line, for the command list
	doc      string // what "leasework help <name>" says before the flags
	new      func() action
}

var commands = []command{
	{
		name:     "migrate",
		synopsis: "[-print]",
		summary:  "create or upgrade the schema (safe to run again)",
		doc: `Migrate creates the schema, the events table and its indexes and trigger,
applying the migrations the table does not have yet. Running it again applies
nothing. Concurrent runs are serialized by the database.

With -print it applies nothing and needs no database: it prints each
migration's SQL for -schema and -table, for a migration tool of your own
(goose, atlas, golang-migrate), with a header saying whether workers may run
while it is applied. Run them in version order, each in a transaction of its
own; each records itself in the table's migrations table, so migrate and
your tool never apply a step twice.`,
		new: func() action { return &migrateCmd{} },
	},
	{
		name:    "stats",
		summary: "rows per status, eligible rows, expired claims, oldest eligible age, held keys, paused queues",
		doc: `Stats prints the table's figures, read in one query: rows per status; rows
eligible now (READY and due); expired claims (INPROGRESS rows whose lease has
passed, abandoned by a dead or stalled worker); how long the oldest
claimable row has been waiting; and the keys held by a FAILED event (its
key's later events WAITING behind it until it is requeued or discarded),
the first few of them by name. It scans the table.`,
		new: func() action { return &statsCmd{} },
	},
	{
		name:     "list",
		synopsis: "[-status S] [-kind K] [-queue Q] [-partition P] [-limit N] [-after ID] | -held [-limit N] | -id N",
		summary:  "list rows by status and kind, with their last error; or the held keys; or one row, and why it is not running",
		doc: `List prints rows in id order: id, event id, kind, key, partition, status,
generation, attempt/max, lease deadline, next attempt (for a finished row,
when it finished) and last error. The table shortens
long event ids, keys and errors to one line; -json gives every field in full.
Page with -after: pass the last id printed (with -json, "next_after").

With -held it lists instead, in key order, the keys held by a FAILED event:
the key, the FAILED row (id, generation, when it failed, its last error) and
how many events of the key wait behind it. They are claimed only after the
row is requeued (leasework requeue -id) or discarded (leasework discard).

With -id N it shows that row alone, every field in full (its cost: the
starts each attempt takes under rate limits); the steps its handler
recorded (framework.Step), one line each in the order recorded: name, the
generation that recorded it, when, size and the value, on one line and cut
short (in hex when it is not text); its output, cut likewise ("-" for
none); and why it is not running, one reason a line: its queue paused; waiting for its key's head (which row,
in which status); not due until when; held by a full concurrency limit
("held by concurrency limit kind:send-email (5/5 live)"); held, or set
aside (WAITING without a key), by its partition's limit ("held by
concurrency limit partition:acme (1/1 live)", or "partition default (2/2
live in partition acme)" under the default limit of the partitions); held
by a rate limit without room for its cost ("held by rate limit
kind:sms.send (100/100 starts per 1m0s): the next start is allowed at
..."; "partition:acme" or "partition default (5/5 starts per 1m0s in
partition acme)" for its partition's, which sets it aside), or one whose
most starts in a window are fewer than its cost, under which it never
starts; waiting its turn in a fair queue, its partition
ahead of the partition furthest behind ("waits its turn in fair queue
bulk: partition acme (weight 3) is 12 rows ahead of the partition furthest
behind"), or, without a partition, taken in the fair queue's order behind
the partitions served by weight. When nothing holds it back it says what
takes it. With -json: {"row": ..., "why": [{"kind": "limit" | "partition"
| "rate" | "paused" | "key" | "not_due" | "fair", "text": ...}], "steps":
[{"name": ..., "generation": ..., "at": ..., "value": base64}], "output":
base64 or null}, the values whole.`,
		new: func() action { return &listCmd{} },
	},
	{
		name:     "requeue",
		synopsis: "(-id N[,N...] | -kind K | -all) [-extra-attempts N]",
		summary:  "move FAILED rows back to READY, due now",
		doc: `Requeue moves FAILED rows back to READY, due at once, with a new generation
(so an owner from before the requeue stays fenced off). Select the rows with
exactly one of -id, -kind and -all; rows in other states are never touched.
By default each row's attempt count is reset, giving it its whole budget
again; -extra-attempts N instead allows N attempts more than it has used.

Matching no row is not an error: it prints "requeued 0 rows" and exits 0.
Rows named by -id that were not requeued are reported with the reason.`,
		new: func() action { return &requeueCmd{} },
	},
	{
		name:     "discard",
		synopsis: "-id N -generation G",
		summary:  "give up on a FAILED row; its key's waiting events go on",
		doc: `Discard gives up on one FAILED row: it becomes DISCARDED (terminal, kept for
the record) with a new generation. If the row has a key, the key is released:
the first event waiting behind it becomes READY. Give the generation the row
was listed with (list -status FAILED, or list -held for the rows holding
keys): a row requeued and failed again since has a newer generation and is
not discarded. To retry the row instead, use requeue.

A row that is not FAILED at that generation, or does not exist, is an error
(exit 1) and nothing is changed.`,
		new: func() action { return &discardCmd{} },
	},
	{
		name:     "cancel",
		synopsis: "-id N [-reason R]",
		summary:  "end an unfinished event (DISCARDED); a running attempt is stopped first",
		doc: `Cancel ends an unfinished event (READY, WAITING, INPROGRESS or FAILED), with
last error "cancelled: <reason>"; it is never claimed again. One that no
attempt runs becomes DISCARDED at once, at a new generation. One that a
worker runs stays INPROGRESS until that attempt stops: its next renewal is
rejected, its handler's context is cancelled with leasework.ErrCancelled,
and its outcome, rejected too, ends the event DISCARDED; a dead or paused
worker's attempt ends when its lease does ("stopping" in -json). A keyed
event passes its key on only then. A finished event (DONE, DISCARDED)
cannot be cancelled: that is an error.`,
		new: func() action { return &cancelCmd{} },
	},
	{
		name:    "queues",
		summary: "each queue with unfinished rows or paused: when paused, rows per status",
		doc: `Queues lists, by name, every queue that has unfinished rows (READY,
INPROGRESS, FAILED, WAITING) or is paused, with when it was paused and its
rows per status. It scans the table's unfinished rows.`,
		new: func() action { return &queuesCmd{} },
	},
	{
		name:     "pause",
		synopsis: "-queue Q",
		summary:  "stop workers claiming from a queue; running handlers finish",
		doc: `Pause stops every worker claiming from the queue, from the moment it returns:
their next claim of it takes nothing, not even expired claims. Handlers
already running finish and record their outcomes; events can still be
enqueued into it. Pausing a paused queue does nothing.`,
		new: func() action { return &pauseCmd{} },
	},
	{
		name:     "resume",
		synopsis: "-queue Q",
		summary:  "let workers claim from a paused queue again, at once",
		doc: `Resume lets workers claim from a paused queue again and wakes the listening
ones, so that its events are claimed at once. Resuming a queue that runs
says so and changes nothing.`,
		new: func() action { return &resumeCmd{} },
	},
	{
		name:     "limits",
		synopsis: "[(-kind K | -queue Q | -partition P | -partition-default) (-max N | -clear | -rate M/PERIOD | -clear-rate) [-by NAME]] | [-queue Q [-partition P] (-weight N | -clear-weight) [-by NAME]] | [-queue Q (-aging D | -clear-aging) [-by NAME]] | -changes [-n N]",
		summary:  "each concurrency limit with its live attempts, each rate limit with its recent starts, each fair queue's weights; set, clear or audit one",
		doc: `Limits lists the concurrency and rate limits and the fair queues' weights and
priority agings, or sets, clears or audits one. A limit
allows at most N live attempts of one kind (-kind, in every queue), of one
queue (-queue, of every kind) or of one partition (-partition: the events
enqueued with that partition key, of every kind and queue) at once, across
every worker: claims take no more. -partition-default names the default
limit of the partitions: each partition without a limit of its own is held
to its N, each on its own (an empty -partition is refused rather than taken
for it, so that a script's unset variable changes no default). An attempt is live from its claim until it ends
or its lease runs out.

With no flags it lists every limit: its scope and name, the attempts live
under it now of its maximum (LIVE/MAX), the due READY events of its kind or
queue it holds back while full (HELD BACK; 0 while it has room; list -id
says what holds one event), and when and by whom it was last set.
A partition's HELD BACK counts its events set aside while it was full
(WAITING without a key, out of the claims' way until it has room). The
default limit of the partitions is listed as partition (default); its LIVE
counts the live attempts of every partition under it, "7 (5 each)", and its
HELD BACK their events set aside.
The attempts that already ran when a limit was first set hold none of its
slots, and are not counted.

-kind K, -queue Q, -partition P or -partition-default with -max N sets that
limit, new or changed: claims that begin after it returns keep it. -max 0
holds the kind, queue or partition: none of its attempts starts. Lowering
a limit stops no running attempt: those that held its slots past the new N
run on outside it until they end (meanwhile up to the old N may run, and
LIVE counts those within it). Idle workers see a raised limit at their next
poll. -clear removes it, and wakes idle workers to claim what it held back;
a partition whose own limit is cleared falls under the default, if one is
set. Each change is written to an audit with who
made it, -by (default: your user name); -changes lists the latest first,
-n of them.

A rate limit allows at most M attempt starts of one kind (-kind, in every
queue), of one queue (-queue, of every kind) or of one partition
(-partition, of every kind and queue) in any window of a period, across
every worker; -partition-default names the default rate limit of the
partitions, which holds each partition without a rate limit of its own to
its M, each in a window of its own. An attempt starts when a claim takes
its event: a first attempt, a retry, an expired lease taken back; it takes
its event's cost in starts (1 unless the event was enqueued with more),
and nothing gives them back. An event a kind's or a queue's rate limit
holds back stays READY until the window has room; one a partition's holds
back is set aside (WAITING without a key) and made READY again when its
partition's window has room. One that costs more than M never starts.
-rate M/PERIOD sets it, new or changed: PERIOD is a duration such as 1m,
30s, 500ms or 24h, or a unit alone for one of it (-rate 100/s, -rate
6000/h); M is from 1 to 10000, PERIOD from 1ms to 24h. The starts already
in the window stay counted: a lowered M admits none until enough of them
leave it; idle workers see a raised one at their next poll. -clear-rate
removes it, and wakes idle workers; a partition whose own rate limit is
cleared falls under the default, if one is set. A kind, queue or
partition may have a concurrency limit and a rate limit at once; each
call changes one. Workers of a version without rate limits per partition
keep none: upgrade every worker before setting one.

The listing shows the rate limits after the concurrency limits: scope
(rate:kind, rate:queue or rate:partition) and name, the rate (MAX/PERIOD,
"100/1m0s"), the starts in the window that ends now (RECENT), while it is
full, when the next start is allowed (NEXT ROOM; "now" while it has room),
and, for a partition's, its events set aside (HELD BACK: WAITING without a
key, by its rate or its concurrency limit; "-" for a kind's or a queue's,
whose events held back stay READY and are not counted). The default rate
limit of the partitions is listed as rate:partition (default), its rate
"5/1m0s each", its RECENT and HELD BACK those of every partition under it,
and its NEXT ROOM "-" (each partition has its window; list -id says when
an event's has room). With -json, the rate limits come in the same list,
with scope "rate:kind", "rate:queue" or "rate:partition" (name "" for the
default), max, per ("1m0s"), per_us, recent, next_at (null while it has
room) and held_back (null for a kind's or a queue's). -changes lists their
changes too, with scope rate:kind, rate:queue or rate:partition, their
maxima, and the period set (PERIOD; for a clear, the one cleared).

-queue Q -weight N makes queue Q fair: within a priority level, its claims
take its events across partitions (an event's partition key) in proportion
to their weights, N for each partition without a weight of its own.
-queue Q -partition P -weight N gives partition P its own weight in queue
Q; N is from 1 to 1000. A partition with nothing due takes no share, and
one whose events come joins level with the partitions served, neither
behind their backlog nor ahead of it. -clear-weight removes the weight:
without -partition, the queue's default, and the queue is no longer fair
(its partitions' weights stay, unused until a default is set again); with
it, the partition's own, and the partition weighs the default.
-queue Q -aging D sets queue Q's priority aging: a due event that has
waited longer than D (a duration such as 10m or 1h30m, from 1ms to 8760h)
is claimed as one priority level higher (priority 5 as 4; never more than
one). -clear-aging removes it.

The listing shows the weights after the rate limits: scope weight, the
queue (NAME), the partition or (default), the weight, and ACTIVE: for the
default, how many of the queue's partitions fair scheduling serves now;
for a partition, 1 while it is served. Then the priority agings: scope
aging, the queue and the wait (AFTER). With -json they come in the same
list: scope "weight" with name (the queue), partition ("" for the
default), weight, active, set_at and set_by; scope "aging" with name,
after ("10m0s") and after_us. -changes lists their changes too, with scope
weight (PARTITION names the partition, or (default)) or aging (PERIOD is
the wait set, or the one a clear removed; the audit does not say which).
Workers of a version without fair scheduling schedule no queue fairly:
upgrade every worker before making a queue fair.

Workers of a version without limits keep none: upgrade every worker, and
migrate, before setting one.`,
		new: func() action { return &limitsCmd{} },
	},
	{
		name:     "ui",
		synopsis: "[-addr host:port] [-actions] [-allow-host name[:port]]",
		summary:  "serve the operator console, a web UI, until interrupted; read-only unless -actions",
		doc: `Ui serves the operator console of the table on -addr and prints its address:
an overview (events per status, queue and kind; eligible rows and the oldest
one's age; expired claims; held keys; paused queues; the last hour's DONE
and FAILED per minute), the events filtered and paged, each event's page,
the queues with the concurrency and rate limits and the fair queues' weights
and agings, and the held keys. It is
read-only unless -actions is given: then its pages requeue, discard and
cancel events, pause and resume queues, and set and clear limits, weights
and agings, for whoever
reaches the address (it asks nobody who they are: keep it on localhost, or
behind a proxy that authenticates). Actions are logged; the limits' audit
records a change as made by "console" and the address it came from.

It answers only to requests whose Host header names its listen address: the
name -addr gives, the address it listens on, and localhost when that is a
loopback address (for an unspecified address such as :8080, localhost and
the machine's interface addresses), at its port. Other names get 403 before
anything is shown: a page of another site that reaches the console under its
own name (DNS rebinding) can neither read it nor act. -allow-host adds names,
such as those of a proxy that passes the browser's Host on.

It runs until interrupted (SIGINT, SIGTERM); -timeout bounds the database
statements of each request, not the run.`,
		new: func() action { return &uiCmd{} },
	},
	{
		name:    "version",
		summary: "this binary's version, its Go release and the schema version it migrates to",
		doc: `Version prints the module version the binary was built from ("(devel)" from a
checkout), the Go release, and the last migration migrate applies. It needs
no database.`,
		new: func() action { return &versionCmd{} },
	},
	{
		name:     "explain",
		synopsis: "[-limit N] [-queue Q] [-kind K ...]",
		summary:  "show the claim's query plan: scans and rows it throws away",
		doc: `Explain runs the claim statement under EXPLAIN (ANALYZE, BUFFERS) inside a
transaction that is rolled back, so nothing is claimed (the rows it would
claim are locked for that moment, and other claimers skip them). It prints
the plan, the number of sequential scans in it and the rows it read only to
discard them. On a large table the claim should read only the READY and
INPROGRESS partial indexes and the primary key, whatever the number of
finished rows: a sequential scan there usually means stale statistics (run
ANALYZE) or a missing index.`,
		new: func() action { return &explainCmd{} },
	},
}

func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// env is what a run sees of the process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// run is the whole program but for the process exit: it returns the exit
// status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return e.run(ctx, args)
}

func (e *env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "leasework: no command given\n\n")
		writeUsage(e.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return e.help(ctx, rest)
	}
	if strings.HasPrefix(name, "-") {
		fmt.Fprintf(e.stderr, "leasework: flag %s before the command; flags go after it: leasework <command> [flags]\n", name)
		fmt.Fprint(e.stderr, "Run 'leasework help' for usage.\n")
		return exitUsage
	}
	c, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(e.stderr, "leasework: unknown command %q\nRun 'leasework help' for usage.\n", name)
		return exitUsage
	}
	return e.runCommand(ctx, c, rest)
}

func (e *env) help(ctx context.Context, args []string) int {
	switch len(args) {
	case 0:
		writeUsage(e.stdout)
		return exitOK
	case 1:
		c, ok := findCommand(args[0])
		if !ok {
			fmt.Fprintf(e.stderr, "leasework help: unknown command %q\nRun 'leasework help' for usage.\n", args[0])
			return exitUsage
		}
		return e.runCommand(ctx, c, []string{"-h"})
	default:
		fmt.Fprint(e.stderr, "leasework help: give at most one command\n")
		return exitUsage
	}
}

// runCommand parses a command's flags, checks them, opens the store and runs
// the command, mapping the outcome to an exit status.
func (e *env) runCommand(ctx context.Context, c command, args []string) int {
	a := c.new()
	var conn connFlags
	fs := flag.NewFlagSet("leasework "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed below
	conn.register(fs)
	a.flags(fs)

	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeCommandUsage(e.stdout, c, fs)
		return exitOK
	case err != nil:
		return e.usageFailure(c, err)
	case fs.NArg() > 0:
		return e.usageFailure(c, usagef("unexpected argument %q (every option is a flag)", fs.Arg(0)))
	}
	if err := a.check(); err != nil {
		return e.usageFailure(c, err)
	}
	if o, ok := a.(offlineAction); ok && o.offline() {
		out := &printer{w: e.stdout, json: conn.json}
		if err := o.execOffline(lease.Options{Schema: conn.schema, Table: conn.table}, out); err != nil {
			return e.failure(c, err)
		}
		return exitOK
	}
	st, err := conn.open(e.getenv)
	if err != nil {
		return e.failure(c, err)
	}
	defer st.DB().Close()

	if s, ok := a.(servingAction); ok {
		s.setTimeout(conn.timeout)
	} else if conn.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, conn.timeout)
		defer cancel()
	}
	out := &printer{w: e.stdout, json: conn.json}
	if err := a.exec(ctx, st, out); err != nil {
		return e.failure(c, explain(st, err, conn.timeout))
	}
	return exitOK
}

func (e *env) failure(c command, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return e.usageFailure(c, err)
	}
	fmt.Fprintf(e.stderr, "leasework %s: %v\n", c.name, err)
	return exitError
}

func (e *env) usageFailure(c command, err error) int {
	fmt.Fprintf(e.stderr, "leasework %s: %v\n", c.name, err)
	fmt.Fprintf(e.stderr, "usage: %s\nRun 'leasework help %s' for details.\n", usageLine(c), c.name)
	return exitUsage
}

func usageLine(c command) string {
	line := "leasework " + c.name
	if c.synopsis != "" {
		line += " " + c.synopsis
	}
	return line + " [common flags]"
}

const commonFlagsText = `	-dsn string      PostgreSQL URL or key=value string (default: $LEASEWORK_DSN;
	                 one of the two is required, no server is started)
	-driver name     pgx or pq (default pgx)
	-schema name     schema of the events table (default leasework)
	-table name      events table (default events); names are lower case
	                 (letters, digits, underscores), as psql finds them unquoted
	-json            print JSON instead of a table
	-timeout d       give up after this long, such as 30s (default 1m; 0: never)
`

const exitText = `	0  success; a requeue that matched no row is a success too
	   ("requeued 0 rows"; with -json, "count": 0)
	1  runtime or database error: server unreachable, table missing (run
	   migrate), statement failed, timeout passed
	2  usage error: unknown command or flag, bad flag value, no database
	   given; nothing was sent to the database
`

func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`leasework operates a leasework events table in PostgreSQL.

Usage:

	leasework <command> [flags]

Commands:

`)
	for _, c := range commands {
		fmt.Fprintf(&b, "\t%-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "\t%-9s %s\n", "help", "this text, or a command's flags: leasework help <command>")
	b.WriteString("\nCommon flags, taken by every command:\n\n")
	b.WriteString(commonFlagsText)
	b.WriteString("\nExit status:\n\n")
	b.WriteString(exitText)
	b.WriteString(`
Examples:

	export LEASEWORK_DSN='postgres://app@db:5432/app?sslmode=disable'
	leasework migrate
	leasework stats -json
	leasework list -status FAILED -kind email -limit 20
	leasework requeue -id 42,43 -extra-attempts 3
	leasework requeue -kind email
	leasework list -held
	leasework discard -id 42 -generation 3
	leasework limits -kind send-email -max 5
	leasework ui -addr localhost:8080 -actions
`)
	io.WriteString(w, b.String())
}

func writeCommandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n\n", usageLine(c), c.doc)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nExit status:\n\n%s", exitText)
}
