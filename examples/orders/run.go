package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/lease"
)

// killPlan is the demonstration, one worker process per round. In round i
// the orders named stop at their point and wait; once every one of them
// stands there and the others are finished, the supervisor kills the
// worker with SIGKILL and starts the next. A last worker, with no points,
// finishes the work and is stopped gracefully.
var killPlan = []map[string]point{
	{"1001": afterReserve, "1002": chargedNotRecorded, "1003": afterReserve, "1004": afterShip},
	{"1001": afterCharge, "1002": afterShip, "1003": afterRelease},
}

// report is what a run did: the kills.
type report struct {
	kills []kill
}

// kill is where a killed worker's orders stood.
type kill struct {
	parked map[string]parked // by order id
}

// parked is an order standing at a kill point.
type parked struct {
	at         point
	generation int64
}

// run places the orders, runs the workers round after round, killing each
// but the last, and prints the summary on out.
func run(ctx context.Context, o options, out io.Writer) (report, error) {
	var rep report
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	p := &printer{w: out}

	dsn, stopServer, err := pgserver.Resolve(ctx, o.dsn)
	if err != nil {
		return rep, err
	}
	if stopServer != nil {
		defer stopServer()
		p.printf("started a throwaway PostgreSQL (no -dsn or $%s given)", pgserver.EnvDSN)
	}
	drv := lwpgx.New()
	db, err := drv.Open(dsn)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	store, err := lease.New(db, drv, lease.Options{Schema: o.schema})
	if err != nil {
		return rep, err
	}
	if err := store.DropSchema(ctx); err != nil {
		return rep, err
	}
	if _, err := store.Migrate(ctx); err != nil {
		return rep, err
	}
	if err := tablesIn(o.schema).create(ctx, db); err != nil {
		return rep, err
	}
	if err := placeOrders(ctx, store, demoOrders); err != nil {
		return rep, err
	}
	p.printf("placed %d orders, one order.placed event each (schema %q):", len(demoOrders), o.schema)
	for _, ord := range demoOrders {
		note := ""
		if ord.Card == cardDeclined {
			note = "  <- the provider declines this card"
		}
		p.printf("  order %s  %-8s %d x %-7s %7s  card %s%s", ord.ID, ord.Customer, ord.Qty, ord.SKU, money(ord.Cents), ord.Card, note)
	}

	s := &supervisor{p: p, store: store, dsn: dsn}
	for round := range len(killPlan) + 1 {
		name := fmt.Sprintf("worker-%d", round+1)
		p.printf("")
		if round < len(killPlan) {
			p.printf("round %d: %s runs the orders; each one below stops at its point, the others run to their end, then the worker is killed", round+1, name)
			for _, ord := range demoOrders {
				if at, ok := killPlan[round][ord.ID]; ok {
					p.printf("  order %s: %s", ord.ID, at)
				}
			}
		} else {
			p.printf("round %d: %s runs the orders to their end", round+1, name)
		}
		w, err := s.start(ctx, name, round)
		if err != nil {
			return rep, err
		}
		if round == len(killPlan) {
			err = s.finish(ctx, w)
		} else {
			var k kill
			k, err = s.killAtPlan(ctx, w, killPlan[round])
			rep.kills = append(rep.kills, k)
		}
		w.close()
		if err != nil {
			return rep, err
		}
	}

	if err := summarize(ctx, p, store, tablesIn(o.schema), demoOrders); err != nil {
		return rep, err
	}
	p.printf("  %d workers killed, each with its orders where the plan put them; every effect applied once; the declined order released once and FAILED", len(rep.kills))
	if stopServer == nil {
		p.printf("  the tables stay in schema %q; an event's steps, by its row: go run ./cmd/leasework list -schema %s -id 1 (same -dsn or $%s)", o.schema, o.schema, pgserver.EnvDSN)
	}
	return rep, nil
}

// supervisor starts, kills and stops the worker processes.
type supervisor struct {
	p     *printer
	store *lease.Store
	dsn   string
}

// workerProc is a running worker process.
type workerProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.Closer
	parks chan parkLine
	done  chan struct{} // closed once the process exited and its output was read
}

// parkLine is a worker's cue that an order stands at its kill point.
type parkLine struct {
	order string
	parked
}

// parkRE matches the line a worker prints when an order stops at its kill
// point.
var parkRE = regexp.MustCompile(`^\[\S+\] order (\S+) generation (\d+): parked (.+); waiting to be killed$`)

// appName is the application name of a worker's database sessions, by
// which the supervisor sees them end.
func appName(worker string) string { return "leasework-orders-" + worker }

// start runs a worker process: this program again, in the worker role.
func (s *supervisor) start(ctx context.Context, name string, round int) (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envRole+"="+roleWorker, envName+"="+name, envRound+"="+strconv.Itoa(round),
		envDSN+"="+withAppName(s.dsn, appName(name)), envSchema+"="+s.store.Schema())
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
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	w := &workerProc{name: name, cmd: cmd, stdin: stdin, parks: make(chan parkLine, 2*len(demoOrders)), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			s.p.printf("%s", line)
			if m := parkRE.FindStringSubmatch(line); m != nil {
				gen, _ := strconv.ParseInt(m[2], 10, 64)
				select {
				case w.parks <- parkLine{order: m[1], parked: parked{at: point(m[3]), generation: gen}}:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(w.done)
	}()
	s.p.printf("started %s (pid %d)", name, cmd.Process.Pid)
	return w, nil
}

// close makes sure the process is gone, whatever happened before.
func (w *workerProc) close() {
	_ = w.stdin.Close() // the worker exits when its stdin ends
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// killAtPlan waits until every order of plan stands at its point and every
// other order is finished, then kills the worker with SIGKILL, checks that
// it died of it, waits for its database sessions to end, and expires its
// leases: the test fixture stands in for waiting workerLease out.
func (s *supervisor) killAtPlan(ctx context.Context, w *workerProc, plan map[string]point) (kill, error) {
	k := kill{parked: map[string]parked{}}
	for len(k.parked) < len(plan) {
		select {
		case pl := <-w.parks:
			if want, ok := plan[pl.order]; !ok || want != pl.at {
				return k, fmt.Errorf("%s: order %s parked %q; the plan says %q", w.name, pl.order, pl.at, want)
			}
			k.parked[pl.order] = pl.parked
		case <-w.done:
			return k, fmt.Errorf("%s exited (%v) before every order reached its kill point", w.name, w.cmd.ProcessState)
		case <-ctx.Done():
			return k, fmt.Errorf("waiting for %s's orders to reach their kill points (%d of %d): %w", w.name, len(k.parked), len(plan), ctx.Err())
		}
	}
	var others []string
	for _, o := range demoOrders {
		if _, ok := plan[o.ID]; !ok {
			others = append(others, o.ID)
		}
	}
	if err := s.waitFinished(ctx, others); err != nil {
		return k, err
	}

	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return k, fmt.Errorf("SIGKILL %s: %w", w.name, err)
	}
	<-w.done
	ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return k, fmt.Errorf("%s did not die of SIGKILL: %v", w.name, w.cmd.ProcessState)
	}
	s.p.printf("SIGKILL: %s died, holding %d claims, each order at its point above", w.name, len(plan))

	// A statement the worker sent before it died runs on in the server
	// until its session notices: wait for its sessions to end, so that
	// none takes a claim or a lease after the fixture below.
	if err := s.waitSessionsGone(ctx, appName(w.name)); err != nil {
		return k, err
	}
	n, err := leasetest.ExpireWorkerLeases(ctx, s.store, w.name)
	if err != nil {
		return k, err
	}
	if n != int64(len(plan)) {
		return k, fmt.Errorf("%s held %d claims when it died; want %d", w.name, n, len(plan))
	}
	s.p.printf("its %d claims stay INPROGRESS until their %v lease runs out; the demonstration expires them now instead of waiting", n, workerLease)
	return k, nil
}

// finish waits until every order is finished, then stops the worker with
// SIGTERM and waits for its graceful exit.
func (s *supervisor) finish(ctx context.Context, w *workerProc) error {
	ids := make([]string, len(demoOrders))
	for i, o := range demoOrders {
		ids[i] = o.ID
	}
	if err := s.waitFinished(ctx, ids); err != nil {
		return err
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s: %w", w.name, err)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s to stop: %w", w.name, ctx.Err())
	}
	if !w.cmd.ProcessState.Success() {
		return fmt.Errorf("%s ended: %v", w.name, w.cmd.ProcessState)
	}
	return nil
}

// waitFinished polls until the events of the orders ids are DONE or FAILED.
func (s *supervisor) waitFinished(ctx context.Context, ids []string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pending, err := s.unfinished(ctx, ids)
		if err == nil && len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for orders %v to finish (last error: %v): %w", pending, err, ctx.Err())
		case <-tick.C:
		}
	}
}

func (s *supervisor) unfinished(ctx context.Context, ids []string) ([]string, error) {
	var pending []string
	for _, id := range ids {
		r, err := s.store.GetByEventID(ctx, Order{ID: id}.eventID())
		if err != nil {
			return ids, err
		}
		if r.Status != leasework.StatusDone && r.Status != leasework.StatusFailed {
			pending = append(pending, id)
		}
	}
	return pending, nil
}

// waitSessionsGone polls until the server has no session of the
// application name.
func (s *supervisor) waitSessionsGone(ctx context.Context, app string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := s.store.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the sessions of %s to end (%d left, last error %v): %w", app, n, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// withAppName returns dsn, a URL or key=value pairs, with the application
// name set.
func withAppName(dsn, name string) string {
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "application_name=" + name
	}
	return dsn + " application_name=" + name
}

// printer writes whole lines, from the supervisor and from the workers'
// output, one at a time.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}
