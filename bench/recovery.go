package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

func init() {
	addSection("recovery", recovery)
	children["recovery-victim"] = recoveryVictim
	children["recovery-river-victim"] = recoveryRiverVictim
}

// recoveryEvents is how many claims the killed worker holds.
const recoveryEvents = 200

// recoveryLease is the lease of both workers.
const recoveryLease = 5 * time.Second

// recovery measures how long a worker SIGKILLed while holding claims takes to
// be replaced: a child process runs a worker whose handlers block, holding
// recoveryEvents claims, and is killed; an idle worker with the default
// configuration (but the same lease) is already running in this process.
// The figure to compare with the lease is the time from the kill until every
// row is DONE, minus the lease the killed worker had left.
func recovery(ctx context.Context, e *env) ([]table, error) {
	rounds := max(e.rounds, 3)
	if e.quick {
		rounds = 1
	}
	t := table{
		title: fmt.Sprintf("Recovery after SIGKILL of a worker holding %d claims (lease %v; median of %d rounds)", recoveryEvents, recoveryLease, rounds),
		header: []string{"system", "lease left at kill", "first takeover after kill", "first takeover − lease",
			"all done after kill", "recovery − lease (target ≤ 100 ms)"},
	}
	for _, drvName := range []string{"pgx", "pq"} {
		var left, first, wake, done, over []float64
		for r := range rounds {
			m, err := recoveryRound(ctx, e, drvName)
			if err != nil {
				return nil, fmt.Errorf("leasework %s, round %d: %w", drvName, r+1, err)
			}
			e.logf("recovery: leasework %s round %d: lease left %.0f ms, first takeover %.0f ms, all done %.0f ms",
				drvName, r+1, msOf(m.left), msOf(m.first), msOf(m.done))
			left = append(left, msOf(m.left))
			first = append(first, msOf(m.first))
			wake = append(wake, msOf(m.first-m.left))
			done = append(done, msOf(m.done))
			over = append(over, msOf(m.done-m.left))
		}
		t.rows = append(t.rows, []string{
			"leasework " + drvName + ", default Config but Lease 5s",
			fmt.Sprintf("%.0f ms", median(left)),
			fmt.Sprintf("%.0f ms", median(first)),
			fmt.Sprintf("%.0f ms", median(wake)),
			fmt.Sprintf("%.0f ms", median(done)),
			fmt.Sprintf("%.0f ms (max %.0f ms)", median(over), maxOf(over)),
		})
	}
	t.rows = append(t.rows, []string{"River v0.51.2, defaults (RescueStuckJobsAfter 1h)", "n/a", "n/a", "n/a", "n/a",
		"n/a (not measured: River's rescuer makes a running job available again only once it has run RescueStuckJobsAfter, default 1 h, checking every 30 s; a killed client's jobs wait about an hour)"})
	// River once, with its rescue shortened to the lease: its recovery
	// waits on fixed intervals (leader election, rescuer, scheduler) of
	// tens of seconds, which more rounds would only repeat.
	m, err := recoveryRiverRound(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("river, rescue shortened: %w", err)
	}
	e.logf("recovery: River: rescue due in %.0f ms, first takeover %.0f ms, all done %.0f ms", msOf(m.left), msOf(m.first), msOf(m.done))
	t.rows = append(t.rows, []string{
		fmt.Sprintf("River v0.51.2 riverpgxv5, JobTimeout = RescueStuckJobsAfter = %v (1 round)", recoveryLease),
		fmt.Sprintf("%.0f ms", msOf(m.left)),
		fmt.Sprintf("%.0f ms", msOf(m.first)),
		fmt.Sprintf("%.0f ms", msOf(m.first-m.left)),
		fmt.Sprintf("%.0f ms", msOf(m.done)),
		fmt.Sprintf("%.0f ms", msOf(m.done-m.left)),
	})
	t.notes = append(t.notes,
		fmt.Sprintf("Killed worker: a child process running framework.Worker (Concurrency %d, Lease %v, handlers that block until cancelled); it is killed once all %d handlers run. Taking over: a framework.Worker in the parent with the default Config except Lease %v (Concurrency %d, PollInterval %v, LISTEN/NOTIFY), started before the kill, idle, handlers that return at once.",
			recoveryEvents, recoveryLease, recoveryEvents, recoveryLease, framework.DefaultConcurrency, framework.DefaultPollInterval),
		"Lease left at kill: max(lease_until) − now() read from the database just after the kill, plus the time from the kill to that read. All done after kill: from the kill until the database shows every row DONE (polled every 2 ms). Recovery − lease = all done after kill − lease left at kill; the per-round maximum in brackets. First takeover − lease is how late the idle worker woke; the rest is the taking-over worker working the 200 rows at its Concurrency.",
		fmt.Sprintf("River: its rescuer (RescueStuckJobsAfter, default 1 h; run every 30 s, an interval its Config does not expose, on the elected leader only) is what gives a killed client's running jobs back; nothing else does. The measured row runs the killed client (MaxWorkers %d, jobs that block) in a child process and an idle client in this process (MaxWorkers %d, FetchCooldown and FetchPollInterval at River's defaults), both with JobTimeout and RescueStuckJobsAfter %v (River refuses a RescueStuckJobsAfter below JobTimeout and rescues no job younger than its JobTimeout). The killed client was the leader, so the rescue waits for its leadership to lapse; the rescued jobs become retryable, River's scheduler makes them available, and the idle client works them. \"Lease left\" is then the time until the last job has run RescueStuckJobsAfter: max(attempted_at) + %v − now() at the kill.",
			recoveryEvents, riverDefaults.maxWorkers, recoveryLease, recoveryLease),
	)
	return []table{t}, nil
}

type recoveryFigures struct {
	left  time.Duration // lease left at the kill
	first time.Duration // from the kill to the first handler call of the worker taking over
	done  time.Duration // from the kill until every row is DONE
}

func recoveryRound(ctx context.Context, e *env, drvName string) (recoveryFigures, error) {
	var f recoveryFigures
	s, err := openLeaseStore(ctx, e, drvName, freshSchema("recovery"))
	if err != nil {
		return f, err
	}
	defer dropLeaseStore(s)
	if err := enqueueBlocking(ctx, s, recoveryEvents); err != nil {
		return f, err
	}
	victim, err := startChild(ctx, "recovery-victim", drvName, e.dsn, s.Schema(), strconv.Itoa(recoveryEvents), recoveryLease.String())
	if err != nil {
		return f, err
	}
	defer victim.stop()
	if _, err := victim.expect("running", 60*time.Second); err != nil {
		return f, err
	}

	// The worker that takes over: started now, it finds every row claimed
	// and waits idle.
	var firstCall atomic.Int64
	w, err := framework.New(s.DB(), s.Driver(), framework.Config{Schema: s.Schema(), Lease: recoveryLease, Logger: quietLogger()})
	if err != nil {
		return f, err
	}
	if err := w.Register("block", leasework.HandlerFunc(func(context.Context, *leasework.Claim) error {
		firstCall.CompareAndSwap(0, time.Now().UnixNano())
		return nil
	}), framework.RetryPolicy{}); err != nil {
		return f, err
	}
	stopTaker := runWorker(ctx, w)
	defer stopTaker()
	if err := waitFor(ctx, 10*time.Second, "the worker taking over to find nothing", func() (bool, error) {
		return w.Counters().ClaimQueries > 0, nil
	}); err != nil {
		return f, err
	}
	time.Sleep(200 * time.Millisecond) // idle, as it would be: past its first empty claim

	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return f, err
	}
	var secs float64
	if err := s.DB().QueryRowContext(ctx, `SELECT extract(epoch FROM max(lease_until) - clock_timestamp()) FROM `+
		s.QualifiedTable()+` WHERE status = 'INPROGRESS'`).Scan(&secs); err != nil {
		return f, fmt.Errorf("read the lease left: %w", err)
	}
	f.left = time.Duration(secs*float64(time.Second)) + time.Since(killed)
	if err := victim.waitSignaled(syscall.SIGKILL, 10*time.Second); err != nil {
		return f, err
	}
	if err := waitForEvery(ctx, s, leasework.StatusDone, recoveryEvents, recoveryLease+30*time.Second, 2*time.Millisecond); err != nil {
		return f, err
	}
	f.done = time.Since(killed)
	f.first = time.Unix(0, firstCall.Load()).Sub(killed)
	return f, nil
}

// recoveryVictim is the child worker that is killed: args are driver, DSN,
// schema, events and lease. It prints "running" once every handler runs.
func recoveryVictim(ctx context.Context, args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("want driver, dsn, schema, events, lease; got %q", args)
	}
	n, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	leaseFor, err := time.ParseDuration(args[4])
	if err != nil {
		return err
	}
	drv, err := leaseDriver(args[0])
	if err != nil {
		return err
	}
	db, err := drv.Open(args[1])
	if err != nil {
		return err
	}
	w, err := framework.New(db, drv, framework.Config{Schema: args[2], Concurrency: n, Lease: leaseFor, Logger: quietLogger()})
	if err != nil {
		return err
	}
	var running atomic.Int64
	if err := w.Register("block", leasework.HandlerFunc(func(ctx context.Context, _ *leasework.Claim) error {
		if running.Add(1) == int64(n) {
			fmt.Println("running")
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}), framework.RetryPolicy{}); err != nil {
		return err
	}
	return w.Run(ctx)
}

// riverRecoveryConfig gives River's clients a rescue after recoveryLease,
// the shortest River allows with a JobTimeout of recoveryLease.
func riverRecoveryConfig(c *river.Config) {
	c.JobTimeout = recoveryLease
	c.RescueStuckJobsAfter = recoveryLease
}

// recoveryRiverRound is recoveryRound for River: the killed client is a
// child process, the idle one runs here.
func recoveryRiverRound(ctx context.Context, e *env) (recoveryFigures, error) {
	var f recoveryFigures
	schema := freshSchema("recovery_river")
	if err := migrateRiver(ctx, e.dsn, schema); err != nil {
		return f, err
	}
	defer dropRiverSchema(context.Background(), e.dsn, schema)
	var firstCall atomic.Int64
	taker, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{
		Settings: riverDefaults,
		Work: func(context.Context, *river.Job[riverArgs]) error {
			firstCall.CompareAndSwap(0, time.Now().UnixNano())
			return nil
		},
		Configure: riverRecoveryConfig,
	})
	if err != nil {
		return f, err
	}
	defer taker.Stop(context.Background())
	// Inserted before either client runs; the victim fetches them all.
	if err := taker.InsertN(ctx, 0, recoveryEvents); err != nil {
		return f, err
	}
	victim, err := startChild(ctx, "recovery-river-victim", e.dsn, schema, strconv.Itoa(recoveryEvents))
	if err != nil {
		return f, err
	}
	defer victim.stop()
	if _, err := victim.expect("running", 60*time.Second); err != nil {
		return f, err
	}
	if err := taker.Start(ctx); err != nil {
		return f, err
	}
	time.Sleep(time.Second) // idle, past its first fetch

	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return f, err
	}
	job := lease.QuoteIdent(schema) + ".river_job"
	var secs float64
	if err := taker.db.QueryRowContext(ctx, `SELECT extract(epoch FROM max(attempted_at) + $1 * interval '1 microsecond' - clock_timestamp())
		FROM `+job+` WHERE state = 'running'`, recoveryLease.Microseconds()).Scan(&secs); err != nil {
		return f, fmt.Errorf("read the rescue time left: %w", err)
	}
	f.left = time.Duration(secs*float64(time.Second)) + time.Since(killed)
	if err := victim.waitSignaled(syscall.SIGKILL, 10*time.Second); err != nil {
		return f, err
	}
	if err := waitEvery(ctx, 180*time.Second, 2*time.Millisecond, fmt.Sprintf("%d River jobs completed", recoveryEvents), func() (bool, error) {
		n, err := taker.Completed(ctx)
		return n >= recoveryEvents, err
	}); err != nil {
		return f, err
	}
	f.done = time.Since(killed)
	f.first = time.Unix(0, firstCall.Load()).Sub(killed)
	return f, nil
}

// recoveryRiverVictim is the River client that is killed: args are DSN,
// schema and jobs. It prints "running" once every job runs.
func recoveryRiverVictim(ctx context.Context, args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want dsn, schema, jobs; got %q", args)
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	var running atomic.Int64
	c, err := newRiverClient(ctx, "pgx", args[0], args[1], riverOptions{
		Settings: riverSettings{name: "defaults", maxWorkers: n},
		Work: func(ctx context.Context, _ *river.Job[riverArgs]) error {
			if running.Add(1) == int64(n) {
				fmt.Println("running")
			}
			<-ctx.Done()
			return ctx.Err()
		},
		Configure: riverRecoveryConfig,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done() // killed before
	return nil
}

// The helpers below are shared by the sections of this file and of
// claimcost.go, rss.go and paused.go.

// leaseDriver returns leasework's driver by name: "pgx" or "pq".
func leaseDriver(name string) (leasework.Driver, error) {
	switch name {
	case "pgx":
		return pgxdriver.New(), nil
	case "pq":
		return pqdriver.New(), nil
	}
	return nil, fmt.Errorf("unknown leasework driver %q", name)
}

// openLeaseDB opens a pool on dsn through leasework's driver drvName.
func openLeaseDB(drvName, dsn string) (*sql.DB, leasework.Driver, error) {
	drv, err := leaseDriver(drvName)
	if err != nil {
		return nil, nil, err
	}
	db, err := drv.Open(dsn)
	if err != nil {
		return nil, nil, err
	}
	return db, drv, nil
}

// openLeaseStore opens a pool through leasework's driver drvName and
// migrates an events table in a new schema.
func openLeaseStore(ctx context.Context, e *env, drvName, schema string) (*lease.Store, error) {
	db, drv, err := openLeaseDB(drvName, e.dsn)
	if err != nil {
		return nil, err
	}
	s, err := lease.New(db, drv, lease.Options{Schema: schema})
	if err == nil {
		_, err = s.Migrate(ctx)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// dropLeaseStore drops the store's schema, so that a long run leaves no
// tables behind, and closes its pool.
func dropLeaseStore(s *lease.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = s.DropSchema(ctx)
	s.DB().Close()
}

// enqueueBlocking enqueues n events of kind "block" in one transaction.
func enqueueBlocking(ctx context.Context, s *lease.Store, n int) error {
	events := make([]lease.Event, n)
	for i := range events {
		events[i] = lease.Event{Kind: "block"}
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		return err
	}
	return tx.Commit()
}

// runWorker runs w until the returned function is called, which stops it
// and waits for Run to return.
func runWorker(ctx context.Context, w *framework.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	return func() {
		w.StopNow()
		cancel()
		<-done
	}
}

// quietLogger discards a worker's logs: they would interleave with the
// tables.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// waitFor polls cond every 5 ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return waitEvery(ctx, timeout, 5*time.Millisecond, what, cond)
}

func waitEvery(ctx context.Context, timeout, every time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: still not so after %v", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// waitForEvery waits until n rows of s's table have status, polling the
// database every poll.
func waitForEvery(ctx context.Context, s *lease.Store, status leasework.Status, n int, timeout, poll time.Duration) error {
	q := `SELECT count(*) FROM ` + s.QualifiedTable() + ` WHERE status = $1`
	return waitEvery(ctx, timeout, poll, fmt.Sprintf("%d rows %s", n, status), func() (bool, error) {
		var got int
		err := s.DB().QueryRowContext(ctx, q, string(status)).Scan(&got)
		return got >= n, err
	})
}

// maxOf returns the largest of xs.
func maxOf(xs []float64) float64 {
	m := 0.0
	for i, x := range xs {
		if i == 0 || x > m {
			m = x
		}
	}
	return m
}

// childProc is this program re-executed in a role of children: its stdout
// lines are its handshakes, its stdin carries the parent's commands.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{} // closed when Wait returned; then state is set
	state  *os.ProcessState
}

// startChild starts role with args.
func startChild(ctx context.Context, role string, args ...string) (*childProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child %s: %w", role, err)
	}
	c := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 64), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.exited)
	}()
	return c, nil
}

// expect returns the first line the child prints that starts with prefix,
// skipping others.
func (c *childProc) expect(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited
				return "", fmt.Errorf("child %s exited (%v) before printing %q", c.role(), c.state, prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line, nil
			}
		case <-deadline:
			return "", fmt.Errorf("child %s printed no %q within %v", c.role(), prefix, timeout)
		}
	}
}

// send writes one command line to the child's stdin.
func (c *childProc) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// waitSignaled waits for the child to end and checks that sig ended it.
func (c *childProc) waitSignaled(sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-c.exited:
	case <-time.After(timeout):
		return fmt.Errorf("child %s still runs %v after %v", c.role(), timeout, sig)
	}
	ws, ok := c.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != sig {
		return fmt.Errorf("child %s ended with %v, not by %v", c.role(), c.state, sig)
	}
	return nil
}

// waitExit waits for the child to exit by itself and checks that it
// succeeded.
func (c *childProc) waitExit(timeout time.Duration) error {
	select {
	case <-c.exited:
	case <-time.After(timeout):
		return fmt.Errorf("child %s did not exit within %v", c.role(), timeout)
	}
	if !c.state.Success() {
		return fmt.Errorf("child %s: %v", c.role(), c.state)
	}
	return nil
}

// stop ends the child if it still runs: a SIGCONT in case it was stopped,
// then SIGKILL; used on every way out of a section.
func (c *childProc) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Kill()
	go func() {
		for range c.lines { // so that the reader reaches Wait
		}
	}()
	<-c.exited
}

func (c *childProc) role() string {
	for _, kv := range c.cmd.Env {
		if v, ok := strings.CutPrefix(kv, childEnv+"="); ok {
			return v
		}
	}
	return "?"
}
