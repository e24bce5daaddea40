package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/lease"
)

// run is the supervisor: it prepares the database, writes the orders,
// starts the worker processes, waits for the work to be done, stops them and
// prints the summary.
func run(ctx context.Context, o options) error {
	ctx, cancel := context.WithTimeout(ctx, o.deadline)
	defer cancel()
	dsn, stopServer, err := pgserver.Resolve(ctx, o.dsn)
	if err != nil {
		return err
	}
	if stopServer != nil {
		defer stopServer()
		fmt.Fprintln(o.out, "started a throwaway PostgreSQL (no -dsn or $"+pgserver.EnvDSN+" given)")
	}
	drv := driverNamed(o.driver)
	db, err := drv.Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := lease.New(db, drv, lease.Options{Schema: o.schema})
	if err != nil {
		return err
	}
	if err := store.DropSchema(ctx); err != nil {
		return err
	}
	if _, err := store.Migrate(ctx); err != nil {
		return err
	}
	orders := lease.QuoteIdent(o.schema) + ".orders"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+orders+` (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		customer text NOT NULL,
		total_cents bigint NOT NULL)`); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}

	for i := 1; i <= o.events; i++ {
		if err := placeOrder(ctx, db, store, orders, i); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.out, "wrote %d orders, each with its order.placed event in the same transaction\n", o.events)

	workers, err := startWorkers(ctx, o, dsn)
	if err != nil {
		return err
	}
	waitErr := waitAllDone(ctx, store, o.events, workers)
	stopWorkers(workers)
	if waitErr != nil {
		return waitErr
	}
	return summarize(ctx, store, o, workers, stopServer == nil)
}

// placeOrder is the application's own write: the order row and its event
// commit together, or not at all.
func placeOrder(ctx context.Context, db *sql.DB, store *lease.Store, orders string, i int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	customer, cents := fmt.Sprintf("customer-%d", (i-1)%4+1), int64(1000+i*250)
	var id int64
	err = tx.QueryRowContext(ctx, `INSERT INTO `+orders+` (customer, total_cents) VALUES ($1, $2) RETURNING id`, customer, cents).Scan(&id)
	if err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	payload, _ := json.Marshal(map[string]any{"order_id": id, "customer": customer, "total_cents": cents})
	ev := lease.Event{Kind: kindOrderPlaced, Key: "order-" + strconv.FormatInt(id, 10), Payload: payload}
	if _, err := store.Enqueue(ctx, tx, ev); err != nil {
		return err
	}
	return tx.Commit()
}

type workerProc struct {
	name  string
	crash bool
	cmd   *exec.Cmd
	done  chan struct{}
}

func startWorkers(ctx context.Context, o options, dsn string) ([]*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*workerProc
	for i := 1; i <= o.workers; i++ {
		p := &workerProc{name: fmt.Sprintf("worker-%d", i), crash: o.crash && i == 1, done: make(chan struct{})}
		p.cmd = exec.Command(exe)
		p.cmd.Env = append(os.Environ(),
			envRole+"=worker", envDSN+"="+dsn, envSchema+"="+o.schema, envName+"="+p.name,
			envDriver+"="+o.driver, envLease+"="+o.lease.String(), envCrash+"="+strconv.FormatBool(p.crash))
		p.cmd.Stdout, p.cmd.Stderr = o.out, os.Stderr
		if err := p.cmd.Start(); err != nil {
			stopWorkers(procs)
			return nil, fmt.Errorf("start %s: %w", p.name, err)
		}
		go func() { p.cmd.Wait(); close(p.done) }()
		procs = append(procs, p)
	}
	fmt.Fprintf(o.out, "started %d worker processes\n", len(procs))
	return procs, nil
}

// waitAllDone polls the table until every event is DONE.
func waitAllDone(ctx context.Context, store *lease.Store, n int, workers []*workerProc) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := store.Stats(ctx)
		if err == nil && st.Rows[leasework.StatusDone] == int64(n) {
			return nil
		}
		alive := 0
		for _, p := range workers {
			select {
			case <-p.done:
			default:
				alive++
			}
		}
		if alive == 0 {
			return errors.New("every worker process exited before the work was done")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the events to be done (%+v): %w", st, ctx.Err())
		case <-tick.C:
		}
	}
}

// stopWorkers asks each live worker to stop gracefully and waits for it.
func stopWorkers(workers []*workerProc) {
	for _, p := range workers {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range workers {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func summarize(ctx context.Context, store *lease.Store, o options, workers []*workerProc, keep bool) error {
	rows, err := store.List(ctx, lease.ListRequest{Limit: o.events})
	if err != nil {
		return err
	}
	fmt.Fprintln(o.out)
	fmt.Fprintln(o.out, "summary")
	fmt.Fprintf(o.out, "  %-10s %-36s %-6s %-10s %-8s %s\n", "order", "event id", "status", "generation", "attempts", "done by")
	recovered := 0
	for _, r := range rows {
		note := ""
		if r.Generation > 1 {
			recovered++
			note = "  <- claimed again after its worker crashed"
		}
		fmt.Fprintf(o.out, "  %-10s %-36s %-6s %-10d %-8d %s%s\n", r.Key, r.EventID, r.Status, r.Generation, r.Attempt, r.Worker, note)
	}
	done := 0
	for _, r := range rows {
		if r.Status == leasework.StatusDone {
			done++
		}
	}
	fmt.Fprintf(o.out, "  %d of %d events DONE; %d recovered from a crashed worker\n", done, o.events, recovered)
	for _, p := range workers {
		st := p.cmd.ProcessState
		switch {
		case p.crash && st.ExitCode() == crashExitCode:
			fmt.Fprintf(o.out, "  %s exited with status %d, on purpose, while holding a claim\n", p.name, crashExitCode)
		case st.Success():
			fmt.Fprintf(o.out, "  %s stopped gracefully\n", p.name)
		default:
			fmt.Fprintf(o.out, "  %s ended: %v\n", p.name, st)
		}
	}
	if keep {
		fmt.Fprintf(o.out, "  the tables stay in schema %q; look at them with: go run ./cmd/leasework list -schema %s (same -dsn or $%s)\n", o.schema, o.schema, pgserver.EnvDSN)
	}
	if done != o.events {
		return fmt.Errorf("%d of %d events DONE", done, o.events)
	}
	if o.crash && recovered == 0 {
		return errors.New("-crash: no event was claimed again")
	}
	return nil
}

func driverNamed(name string) leasework.Driver {
	if name == "pq" {
		return pqdriver.New()
	}
	return pgxdriver.New()
}
