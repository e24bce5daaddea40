package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

func init() {
	addSection("paused", paused)
	children["paused-owner"] = pausedOwner
}

// pausedLease is owner A's lease in leasework, and River's JobTimeout and
// RescueStuckJobsAfter: the shortest River allows, since the rescuer leaves
// a job alone until it has run its timeout (see riverPausedConfig).
const pausedLease = 2 * time.Second

// riverPausedConfig shortens River's rescue for the paused scenario. River
// refuses RescueStuckJobsAfter below JobTimeout, and its rescuer ignores a
// job that has run less than its JobTimeout (with JobTimeout -1, never
// rescues it), so both are set to pausedLease. It applies to both clients.
func riverPausedConfig(c *river.Config) {
	c.JobTimeout = pausedLease
	c.RescueStuckJobsAfter = pausedLease
}

// pausedResult is what one system did.
type pausedResult struct {
	tookOver  time.Duration // from SIGSTOP of A until B's handler started
	aSaid     string        // A's report of its late completion
	accepted  bool          // the row shows A's completion while B still runs
	during    string        // the row while B still runs, after A's write
	after     string        // the row after B returned and its client stopped
	bTookOver string        // what B was given: generation or attempt
}

// paused runs the paused-owner scenario against each system: owner A (a
// child process) takes an event and starts its handler; A is SIGSTOPped;
// the system's recovery gives the event to B, in this process, whose handler
// then keeps running; A is SIGCONTed and its handler returns success; the
// row is read while B still runs. A system whose row then shows the event
// completed accepted a stale completion: B's work is not done, and nothing
// will run it again.
func paused(ctx context.Context, e *env) ([]table, error) {
	t := table{
		title: "Paused owner: A pauses (SIGSTOP) holding an event, B takes it over, A resumes and completes it while B still runs",
		header: []string{"system", "B took over after", "what B was given", "A's late completion",
			"stale completion accepted", "row while B still runs", "row after B finished"},
	}
	systems := []struct {
		name string
		run  func(context.Context, *env) (pausedResult, error)
	}{
		{"leasework pgx, lease.Store (A completes with WriteMany)", func(ctx context.Context, e *env) (pausedResult, error) {
			return pausedLeasework(ctx, e, "store")
		}},
		{"leasework pgx, framework.Worker (A's handler returns nil)", func(ctx context.Context, e *env) (pausedResult, error) {
			return pausedLeasework(ctx, e, "worker")
		}},
		{"River v0.51.2 riverpgxv5 (A's worker returns nil)", pausedRiver},
	}
	for _, sys := range systems {
		r, err := sys.run(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sys.name, err)
		}
		e.logf("paused: %s: took over after %.1fs; accepted %v; during: %s", sys.name, r.tookOver.Seconds(), r.accepted, r.during)
		t.rows = append(t.rows, []string{sys.name, fmt.Sprintf("%.1f s", r.tookOver.Seconds()), r.bTookOver, r.aSaid,
			yesNo(r.accepted), r.during, r.after})
	}
	t.notes = append(t.notes,
		"A is a child process; B runs in this process. A's handler (or, for lease.Store, the code between claim and completion) waits for the parent's word and then reports success without looking at its context: a process paused mid-work (a stop-the-world pause, a frozen VM) finishes the work it was doing when it resumes. The parent sends that word right after SIGCONT, while B's handler is still running.",
		fmt.Sprintf("leasework: A claims with Lease %v; B is a framework.Worker with the default Config (Lease %v), started after A was stopped, which claims the row once A's lease has expired (a new generation). lease.Store row: A calls Store.WriteMany with a lease.Complete of the generation it was given. framework.Worker row: A is a framework.Worker (Concurrency 1, Lease %v); its counters after the handler returned are shown.", pausedLease, framework.DefaultLease, pausedLease),
		fmt.Sprintf("River: both clients with JobTimeout %v and RescueStuckJobsAfter %v (River's default is 1 h; it refuses RescueStuckJobsAfter below JobTimeout, and its rescuer skips a job younger than its JobTimeout), FetchCooldown/FetchPollInterval at River's defaults. B is started after A was stopped; A was the leader, so B's rescuer runs only once A's leadership has lapsed (River's leader TTL) and B is elected; the rescuer sets the job retryable, River's scheduler makes it available, and B fetches it (a new attempt). A's worker then returns nil and A's client is stopped, which waits for its completer to write.", pausedLease, pausedLease),
		"Stale completion accepted: yes when the row shows the event finished (DONE / completed) while B's handler is still running; no when the row still shows B's claim in progress.",
	)
	return []table{t}, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// pausedLeasework runs the scenario with A in mode "store" (lease.Store
// claim, then WriteMany of its completion) or "worker" (framework.Worker).
func pausedLeasework(ctx context.Context, e *env, mode string) (pausedResult, error) {
	var r pausedResult
	s, err := openLeaseStore(ctx, e, "pgx", freshSchema("paused"))
	if err != nil {
		return r, err
	}
	defer dropLeaseStore(s)
	if err := enqueueBlocking(ctx, s, 1); err != nil {
		return r, err
	}
	a, err := startChild(ctx, "paused-owner", mode, e.dsn, s.Schema())
	if err != nil {
		return r, err
	}
	defer a.stop()
	if _, err := a.expect("started", 60*time.Second); err != nil {
		return r, err
	}
	stopped := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return r, err
	}

	// B: a default worker, started now; it claims the row when A's lease
	// has expired.
	bStarted := make(chan leasework.Claim, 1)
	bRelease := make(chan struct{})
	w, err := framework.New(s.DB(), s.Driver(), framework.Config{Schema: s.Schema(), WorkerID: "B", Logger: quietLogger()})
	if err != nil {
		return r, err
	}
	if err := w.Register("block", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		bStarted <- *c
		select {
		case <-bRelease:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}), framework.RetryPolicy{}); err != nil {
		return r, err
	}
	stopB := runWorker(ctx, w)
	defer stopB()
	var bc leasework.Claim
	select {
	case bc = <-bStarted:
	case <-time.After(60 * time.Second):
		return r, errors.New("owner B did not take the event over within 60s")
	}
	r.tookOver = time.Since(stopped)
	r.bTookOver = fmt.Sprintf("generation %d, attempt %d", bc.Generation, bc.Attempt)

	if r.aSaid, err = resumeAndFinish(a, 30*time.Second); err != nil {
		return r, err
	}
	row, err := s.Get(ctx, bc.ID)
	if err != nil {
		return r, err
	}
	r.accepted = row.Status == leasework.StatusDone
	r.during = leaseRowState(row)

	close(bRelease)
	if err := waitFor(ctx, 30*time.Second, "B's outcome", func() (bool, error) {
		c := w.Counters()
		return c.Completed+c.StaleRejections+c.LeasesLost > 0, nil
	}); err != nil {
		return r, err
	}
	stopB()
	if row, err = s.Get(ctx, bc.ID); err != nil {
		return r, err
	}
	r.after = leaseRowState(row)
	if c := w.Counters(); c.Completed == 1 {
		r.after += "; B's completion accepted"
	} else {
		r.after += fmt.Sprintf("; B: %d completed, %d stale rejections", c.Completed, c.StaleRejections)
	}
	if err := a.send("exit"); err != nil {
		return r, err
	}
	return r, a.waitExit(30 * time.Second)
}

// leaseRowState is a row as the table shows it.
// resumeAndFinish resumes the stopped owner a (SIGCONT), tells it to finish
// its work, and returns what it says its late completion did.
func resumeAndFinish(a *childProc, timeout time.Duration) (string, error) {
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return "", err
	}
	if err := a.send("finish"); err != nil {
		return "", err
	}
	line, err := a.expect("result", timeout)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "result")), nil
}

func leaseRowState(row lease.Row) string {
	s := fmt.Sprintf("%s, generation %d, attempt %d", row.Status, row.Generation, row.Attempt)
	if row.Worker != "" {
		s += ", worker " + row.Worker
	}
	return s
}

// pausedRiver runs the scenario against River: A is a River client in a
// child process, B one in this process.
func pausedRiver(ctx context.Context, e *env) (pausedResult, error) {
	var r pausedResult
	schema := freshSchema("paused_river")
	if err := migrateRiver(ctx, e.dsn, schema); err != nil {
		return r, err
	}
	defer dropRiverSchema(context.Background(), e.dsn, schema)

	type started struct{ id, attempt int64 }
	bStarted := make(chan started, 1)
	bRelease := make(chan struct{})
	b, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{
		Settings: riverDefaults,
		Work: func(ctx context.Context, job *river.Job[riverArgs]) error {
			bStarted <- started{job.ID, int64(job.Attempt)}
			select {
			case <-bRelease:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Configure: riverPausedConfig,
	})
	if err != nil {
		return r, err
	}
	defer b.Stop(context.Background())

	a, err := startChild(ctx, "paused-owner", "river", e.dsn, schema)
	if err != nil {
		return r, err
	}
	defer a.stop()
	if _, err := a.expect("ready", 60*time.Second); err != nil {
		return r, err
	}
	// B inserts the job but is not started yet: only A can fetch it.
	if err := b.InsertOne(ctx, riverArgs{Num: 1}); err != nil {
		return r, err
	}
	if _, err := a.expect("started", 60*time.Second); err != nil {
		return r, err
	}
	stopped := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return r, err
	}
	if err := b.Start(ctx); err != nil {
		return r, err
	}
	var bs started
	select {
	case bs = <-bStarted:
	case <-time.After(180 * time.Second):
		return r, errors.New("owner B did not take the job over within 180s")
	}
	r.tookOver = time.Since(stopped)
	r.bTookOver = fmt.Sprintf("attempt %d", bs.attempt)

	if r.aSaid, err = resumeAndFinish(a, 60*time.Second); err != nil {
		return r, err
	}
	state, during, err := riverRowState(ctx, b, bs.id)
	if err != nil {
		return r, err
	}
	r.accepted = state == "completed"
	r.during = during

	close(bRelease)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Stop waits for B's job and for B's completer to write its outcome.
	if err := b.Stop(stopCtx); err != nil {
		return r, err
	}
	reader, err := openDB(ctx, "pgx", e.dsn)
	if err != nil {
		return r, err
	}
	defer reader.Close()
	if _, r.after, err = riverRowStateDB(ctx, reader, schema, bs.id); err != nil {
		return r, err
	}
	return r, a.waitExit(30 * time.Second)
}

// riverRowState reads a River job's row through c's pool.
func riverRowState(ctx context.Context, c *riverClient, id int64) (state, desc string, err error) {
	return riverRowStateDB(ctx, c.db, c.schema, id)
}

func riverRowStateDB(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, schema string, id int64) (state, desc string, err error) {
	var attempt int64
	var by string
	var finalized bool
	err = db.QueryRowContext(ctx, `SELECT state::text, attempt, coalesce(array_length(attempted_by, 1), 0)::text, finalized_at IS NOT NULL
		FROM `+lease.QuoteIdent(schema)+`.river_job WHERE id = $1`, id).Scan(&state, &attempt, &by, &finalized)
	if err != nil {
		return "", "", fmt.Errorf("read River's job: %w", err)
	}
	desc = fmt.Sprintf("%s, attempt %d, %s attempted_by entries", state, attempt, by)
	if finalized {
		desc += ", finalized_at set"
	}
	return state, desc, nil
}

// pausedOwner is owner A, a child of paused: args are mode ("store",
// "worker" or "river"), DSN and schema. It prints "started" once it holds
// the event, waits for "finish" on stdin, reports success, prints "result"
// with what it saw, and exits on "exit" (River: once its client stopped).
func pausedOwner(ctx context.Context, args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want mode, dsn, schema; got %q", args)
	}
	mode, dsn, schema := args[0], args[1], args[2]
	finish, exit := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "finish":
				close(finish)
			case "exit":
				close(exit)
				return
			}
		}
	}()
	switch mode {
	case "store":
		db, drv, err := openLeaseDB("pgx", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		s, err := lease.New(db, drv, lease.Options{Schema: schema})
		if err != nil {
			return err
		}
		cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: pausedLease, Worker: "A"})
		if err != nil || len(cs) != 1 {
			return fmt.Errorf("claim: %d claims, %v", len(cs), err)
		}
		fmt.Printf("started %d %d\n", cs[0].ID, cs[0].Generation)
		<-finish
		res, err := s.WriteMany(ctx, lease.Complete(cs[0].Ref()))
		switch {
		case err != nil:
			fmt.Printf("result WriteMany failed: %v\n", err)
		case res[0].Verdict == lease.VerdictNoAnswer:
			fmt.Printf("result WriteMany failed: %v\n", res[0].Err)
		case res[0].Err != nil:
			fmt.Printf("result WriteMany (generation %d): rejected, %v\n", cs[0].Generation, res[0].Err)
		default:
			fmt.Printf("result WriteMany (generation %d): accepted, status %s\n", cs[0].Generation, res[0].Status)
		}
		<-exit
		return nil

	case "worker":
		db, drv, err := openLeaseDB("pgx", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		w, err := framework.New(db, drv, framework.Config{Schema: schema, WorkerID: "A", Concurrency: 1, Lease: pausedLease, Logger: quietLogger()})
		if err != nil {
			return err
		}
		causes := make(chan error, 1)
		if err := w.Register("block", leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			fmt.Printf("started %d %d\n", c.ID, c.Generation)
			<-finish
			causes <- context.Cause(ctx)
			return nil
		}), framework.RetryPolicy{}); err != nil {
			return err
		}
		stop := runWorker(ctx, w)
		defer stop()
		cause := <-causes
		// The worker settles the returned attempt: a completion written,
		// rejected, or dropped as lost.
		_ = waitFor(ctx, 10*time.Second, "the attempt's outcome", func() (bool, error) {
			c := w.Counters()
			return c.Completed+c.StaleRejections+c.LeasesLost+c.LocalLeaseTimeouts > 0, nil
		})
		time.Sleep(200 * time.Millisecond) // counters of the same outcome land together
		c := w.Counters()
		fmt.Printf("result handler returned nil (its context: %v); worker counters: completed %d, stale rejections %d, leases lost %d, local lease timeouts %d\n",
			cause, c.Completed, c.StaleRejections, c.LeasesLost, c.LocalLeaseTimeouts)
		<-exit
		return nil

	case "river":
		var jobCtxErr error
		returned := make(chan struct{})
		c, err := newRiverClient(ctx, "pgx", dsn, schema, riverOptions{
			Settings: riverDefaults,
			Work: func(ctx context.Context, job *river.Job[riverArgs]) error {
				fmt.Printf("started %d %d\n", job.ID, job.Attempt)
				<-finish
				jobCtxErr = context.Cause(ctx)
				close(returned)
				return nil
			},
			Configure: riverPausedConfig,
		})
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		fmt.Println("ready")
		<-returned
		// Stop waits for the completer to write the job's outcome.
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = c.Stop(stopCtx)
		fmt.Printf("result worker returned nil (its context: %v); client stopped (%v), its completer flushed\n", jobCtxErr, errOrOK(err))
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}
