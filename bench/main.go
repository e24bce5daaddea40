// Command bench measures leasework beside River on one PostgreSQL server, in
// one run, and prints a table per measurement: throughput, keyed events
// against keyless, the enqueue side, pickup latency, claim cost against
// finished history, recovery after a crash, peak memory, server cost per
// job, whether a paused owner's stale completion is accepted, and each
// system under pressure.
//
// The keyed section runs one leasework worker at its defaults through each
// driver on no-op events enqueued up front: keyless, spread round-robin
// over 1,000 keys, and over 10 hot keys (a fifth of the events: a key's
// events run one at a time), and prints each row's median ÷ the keyless
// median of its driver, beside the goal of 0.8 over 1,000 keys.
//
// The steps section runs one leasework worker at its defaults through each
// driver on no-op events enqueued up front, with a handler without steps,
// handlers of 1 and 3 framework.Step calls and one of 3 framework.StepTx
// calls (each in a transaction of its own on the worker's pool), and
// prints each row's median ÷ the median without steps of its driver,
// reported beside no goal.
//
// The enqueue section measures the producer: events per second into the
// table when the caller's own transactions carry them (one business row
// and 1, 100 or 5,000 events each, keyless and keyed, with and without
// SkipDuplicates) from -producers concurrent producers, through each
// leasework driver beside River's InsertTx, InsertManyTx and
// InsertManyFastTx; and, for one event a transaction, the caller's
// transaction latency with the enqueue and without it.
//
// The pressure section runs a steady producer (-pressure-rate events/s,
// handlers that sleep 1 ms) through one leasework pgx worker and one River
// pgx client at their defaults, one system at a time, over phases of
// -pressure-phase each: clean, an idle transaction pinning the xmin
// horizon, recovery; clean, four REPEATABLE READ readers scanning the
// events table, recovery; clean, the producer at 1.5×, recovery. Per phase
// it prints the completion rate, pickup p50 and p99 from the enqueue's
// commit, the queue depth, dead tuples and the table's sizes at the
// phase's end and, for leasework, one EXPLAIN (ANALYZE) of the claim; then
// the two side by side with the project's goals: a stress phase at 0.8× the
// clean rate or more, p99 pickup under 1 s, recovery within one phase.
//
// It is a module of its own, so that River is never a dependency of
// leasework. From the repository's root:
//
//	go run ./bench                 # every section, on a throwaway durable PostgreSQL
//	go run ./bench -dsn postgres://… -sections throughput,pickup
//	go run ./bench -sections keyed -rounds 3
//	go run ./bench -sections steps -jobs 10000 -rounds 3
//	go run ./bench -sections enqueue -producers 8
//	go run ./bench -sections pressure -pressure-rate 800 -pressure-phase 2m
//
// With no -dsn and no $LEASEWORK_DSN it starts a throwaway cluster from the
// local server binaries with fsync on (a benchmark on fsync off would
// flatter every system) and pg_stat_statements loaded. Systems are
// interleaved round by round, so that a machine's changing load falls on
// all of them alike: compare ratios within one run, not figures across runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/leasework/leasework/internal/rig/pgserver"
)

// env is what every section gets.
type env struct {
	dsn       string           // the server to measure on, as a URL
	server    *pgserver.Server // the throwaway cluster; nil when -dsn or $LEASEWORK_DSN named a server
	jobs      int              // events per throughput run
	rounds    int              // rounds of each interleaved measurement
	producers int              // concurrent producers of the enqueue section's events/s runs
	quick     bool             // a smoke run: every figure is rough

	pressureRate    int           // the pressure section's producer rate, events/s; zero: its default
	pressureRateSet bool          // -pressure-rate was given (-quick caps the default only)
	pressurePhase   time.Duration // each pressure phase's length; zero: its default
	log             io.Writer     // progress lines, on stderr
	logf            func(string, ...any)
}

// table is one section's result, printed as a Markdown table.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string // printed under the table
}

// section is one measurement.
type section struct {
	name string
	run  func(ctx context.Context, e *env) ([]table, error)
}

// sections run in this order; each file adds its own in an init function
// through addSection, and -sections picks some by name.
var sections []section

func addSection(name string, run func(ctx context.Context, e *env) ([]table, error)) {
	sections = append(sections, section{name, run})
}

// order is the order of the sections in the output, whatever the order of
// their files' init functions.
var order = []string{"throughput", "keyed", "enqueue", "pickup", "server", "claimcost", "recovery", "rss", "paused", "pressure", "limits", "partitions", "fairness", "steps"}

// children are roles this program plays when it re-executes itself (a worker
// to kill, a process whose memory is measured): name → function, added by the
// sections' files. The child's role is in $LEASEWORK_BENCH_CHILD, its
// arguments in os.Args[1:].
var children = map[string]func(ctx context.Context, args []string) error{}

const childEnv = "LEASEWORK_BENCH_CHILD"

func main() {
	if role := os.Getenv(childEnv); role != "" {
		run, ok := children[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "bench: unknown child role %q\n", role)
			os.Exit(2)
		}
		if err := run(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "bench child %s: %v\n", role, err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dsn    = flag.String("dsn", "", "PostgreSQL URL to measure on (default $LEASEWORK_DSN, else a throwaway durable cluster)")
		names  = flag.String("sections", "all", "comma-separated sections to run: all, or some of "+strings.Join(order, ","))
		jobs   = flag.Int("jobs", 50000, "events per throughput run")
		rounds = flag.Int("rounds", 2, "rounds of each interleaved measurement")
		prods  = flag.Int("producers", 4, "concurrent producers of the enqueue section's events/s runs")
		quick  = flag.Bool("quick", false, "a short smoke run: fewer events and rows; figures are rough")
		pRate  = flag.Int("pressure-rate", pressureDefaultRate, "the pressure section's producer rate, events/s (with -quick, capped at 200 unless given)")
		pPhase = flag.Duration("pressure-phase", 0, "the length of each pressure phase (default 2m, 1s with -quick)")
	)
	flag.Parse()
	if *jobs < 1000 || *rounds < 1 || *prods < 1 {
		return fmt.Errorf("-jobs must be at least 1000, -rounds and -producers at least 1")
	}
	if *pRate < 1 || *pPhase < 0 {
		return fmt.Errorf("-pressure-rate must be at least 1, -pressure-phase not negative")
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*names, ",") {
		n = strings.TrimSpace(n)
		if n != "all" && !slices.Contains(order, n) {
			return fmt.Errorf("-sections: unknown section %q; the sections are %s", n, strings.Join(order, ", "))
		}
		want[n] = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e := &env{jobs: *jobs, rounds: *rounds, producers: *prods, quick: *quick, log: os.Stderr,
		pressureRate: *pRate, pressurePhase: *pPhase}
	flag.Visit(func(f *flag.Flag) { e.pressureRateSet = e.pressureRateSet || f.Name == "pressure-rate" })
	e.logf = func(format string, args ...any) {
		fmt.Fprintf(e.log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	var err error
	e.dsn, e.server, err = pgserver.ResolveWith(ctx, *dsn, pgserver.Options{
		Durable:  true,
		Settings: []string{"shared_preload_libraries=pg_stat_statements", "max_connections=500"},
	})
	if err != nil {
		return err
	}
	if e.server != nil {
		defer e.server.Stop()
		e.logf("throwaway PostgreSQL (fsync on) at %s", e.dsn)
	}
	fmt.Println(describe(ctx, e))
	for _, name := range order {
		if !want["all"] && !want[name] {
			continue
		}
		i := slices.IndexFunc(sections, func(s section) bool { return s.name == name })
		if i < 0 {
			return fmt.Errorf("section %q is not built into this program", name)
		}
		e.logf("section %s", name)
		tables, err := sections[i].run(ctx, e)
		if err != nil {
			return fmt.Errorf("section %s: %w", name, err)
		}
		for _, t := range tables {
			t.print(os.Stdout)
		}
	}
	return nil
}

// print writes t as a Markdown table.
func (t table) print(w io.Writer) {
	fmt.Fprintf(w, "\n### %s\n\n", t.title)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(cells []string) { fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, "\t| ")) }
	line(t.header)
	sep := make([]string, len(t.header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
	tw.Flush()
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range t.notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}
