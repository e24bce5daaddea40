package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/riverqueue/river"
)

func init() {
	addSection("rss", rss)
	children["rss-holder"] = rssHolder
}

// rssInFlight is how many handlers run at once.
const rssInFlight = 1000

// rssSystems are the systems measured, by the name the child knows them.
var rssSystems = []string{"leasework-pgx", "leasework-pq", "river-pgx"}

// rss measures the peak resident memory of a process with rssInFlight
// handlers running at once: a child process runs one system's worker, idle
// first (its baseline), then with rssInFlight events enqueued whose handlers
// block until told to stop. The peak is the kernel's VmHWM of the child,
// read once every handler runs.
func rss(ctx context.Context, e *env) ([]table, error) {
	rounds := e.rounds
	if e.quick {
		rounds = 1
	}
	idle := map[string][]float64{}
	peak := map[string][]float64{}
	for r := range rounds {
		for _, sys := range rssSystems { // interleaved, round by round
			i, p, err := rssRound(ctx, e, sys)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", sys, r+1, err)
			}
			e.logf("rss: %s round %d: idle %.1f MB, peak %.1f MB", sys, r+1, i, p)
			idle[sys] = append(idle[sys], i)
			peak[sys] = append(peak[sys], p)
		}
	}
	t := table{
		title:  fmt.Sprintf("Peak RSS of a worker process with %s handlers in flight (median of %d rounds)", thousands(rssInFlight), rounds),
		header: []string{"system", "RSS idle (baseline)", "peak RSS, all in flight (VmHWM)", "peak − idle"},
	}
	names := map[string]string{
		"leasework-pgx": "leasework pgx, Concurrency 1000",
		"leasework-pq":  "leasework pq, Concurrency 1000",
		"river-pgx":     "River v0.51.2 riverpgxv5, MaxWorkers 1000",
	}
	for _, sys := range rssSystems {
		i, p := median(idle[sys]), median(peak[sys])
		t.rows = append(t.rows, []string{names[sys], fmt.Sprintf("%.1f MB", i), fmt.Sprintf("%.1f MB", p), fmt.Sprintf("%.1f MB", p-i)})
	}
	t.notes = append(t.notes,
		fmt.Sprintf("Each figure is a child process of this program (same binary, so the same code size) running one system's worker alone: its VmRSS once the worker runs idle on an empty table, and its VmHWM (peak RSS) once all %s handlers run; handlers block until the parent says stop, then the child stops its worker and exits. MB = 10^6 bytes.", thousands(rssInFlight)),
		fmt.Sprintf("leasework: framework.Worker, Concurrency 1000, other fields default (Lease %v, LISTEN/NOTIFY); events enqueued by the parent in one transaction once the child is idle. River: client with MaxWorkers 1000 on the default queue, FetchCooldown and FetchPollInterval at River's defaults, riverpgxv5 on a pgxpool of pgx's default size; jobs inserted by the parent with InsertMany. Go runtime defaults (GOGC 100) in the child.", framework.DefaultLease),
	)
	return []table{t}, nil
}

// rssRound runs one child for sys and returns its idle RSS and its peak RSS
// with every handler running, in MB.
func rssRound(ctx context.Context, e *env, sys string) (idle, peak float64, err error) {
	var enqueue func() error
	var cleanup func()
	var schema string
	if strings.HasPrefix(sys, "leasework-") {
		s, err := openLeaseStore(ctx, e, strings.TrimPrefix(sys, "leasework-"), freshSchema("rss"))
		if err != nil {
			return 0, 0, err
		}
		schema, cleanup = s.Schema(), func() { dropLeaseStore(s) }
		enqueue = func() error { return enqueueBlocking(ctx, s, rssInFlight) }
	} else {
		schema = freshSchema("rss_river")
		if err := migrateRiver(ctx, e.dsn, schema); err != nil {
			return 0, 0, err
		}
		inserter, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{Settings: riverDefaults})
		if err != nil {
			return 0, 0, err
		}
		cleanup = func() {
			_ = inserter.Stop(context.Background())
			_ = dropRiverSchema(context.Background(), e.dsn, schema)
		}
		enqueue = func() error { return inserter.InsertN(ctx, 0, rssInFlight) }
	}
	defer cleanup()

	c, err := startChild(ctx, "rss-holder", sys, e.dsn, schema, strconv.Itoa(rssInFlight))
	if err != nil {
		return 0, 0, err
	}
	defer c.stop()
	if _, err := c.expect("idle", 60*time.Second); err != nil {
		return 0, 0, err
	}
	idleKB, _, err := procMemory(c.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	if err := enqueue(); err != nil {
		return 0, 0, err
	}
	if _, err := c.expect("inflight", 120*time.Second); err != nil {
		return 0, 0, err
	}
	_, peakKB, err := procMemory(c.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	if err := c.send("stop"); err != nil {
		return 0, 0, err
	}
	if err := c.waitExit(60 * time.Second); err != nil {
		return 0, 0, err
	}
	return float64(idleKB) * 1024 / 1e6, float64(peakKB) * 1024 / 1e6, nil
}

// procMemory reads VmRSS and VmHWM, in kB, from /proc/<pid>/status.
func procMemory(pid int) (rssKB, hwmKB int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read process memory (Linux /proc only): %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			rssKB, _ = strconv.ParseInt(fields[1], 10, 64)
		case "VmHWM:":
			hwmKB, _ = strconv.ParseInt(fields[1], 10, 64)
		}
	}
	if rssKB == 0 || hwmKB == 0 {
		return 0, 0, fmt.Errorf("no VmRSS/VmHWM in /proc/%d/status", pid)
	}
	return rssKB, hwmKB, nil
}

// rssHolder is the child of rss: args are system, DSN, schema and the
// number of handlers. It prints "idle" once its worker runs, "inflight"
// once that many handlers run, and stops when stdin says "stop".
func rssHolder(ctx context.Context, args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("want system, dsn, schema, handlers; got %q", args)
	}
	sys, dsn, schema := args[0], args[1], args[2]
	n, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	release := make(chan struct{})
	var running atomic.Int64
	started := func() {
		if running.Add(1) == int64(n) {
			fmt.Println("inflight")
		}
	}
	// idleThenWait reports the worker idle, after a second to settle (its
	// first fetch or claim, its listener), and waits for "stop".
	idleThenWait := func() {
		time.Sleep(time.Second)
		fmt.Println("idle")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() && sc.Text() != "stop" {
		}
		close(release)
	}

	if drvName, ok := strings.CutPrefix(sys, "leasework-"); ok {
		db, drv, err := openLeaseDB(drvName, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		w, err := framework.New(db, drv, framework.Config{Schema: schema, Concurrency: n, Logger: quietLogger()})
		if err != nil {
			return err
		}
		if err := w.Register("block", leasework.HandlerFunc(func(ctx context.Context, _ *leasework.Claim) error {
			started()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}), framework.RetryPolicy{}); err != nil {
			return err
		}
		stop := runWorker(ctx, w)
		if err := waitFor(ctx, 30*time.Second, "the worker's first claim", func() (bool, error) {
			return w.Counters().ClaimQueries > 0, nil
		}); err != nil {
			return err
		}
		idleThenWait()
		// Let the handlers' completions be written before stopping.
		if err := waitFor(ctx, 30*time.Second, "the completions", func() (bool, error) {
			return w.Counters().Completed >= int64(n), nil
		}); err != nil {
			return err
		}
		stop()
		return nil
	}

	c, err := newRiverClient(ctx, "pgx", dsn, schema, riverOptions{
		Settings: riverSettings{name: "defaults, MaxWorkers 1000", maxWorkers: n},
		Work: func(ctx context.Context, _ *river.Job[riverArgs]) error {
			started()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	idleThenWait()
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Stop(stopCtx)
}
