package main

// The steps section: what checkpointed steps cost a handler, through each
// leasework driver, at the worker's defaults, in interleaved rounds.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
)

func init() { addSection("steps", steps) }

// stepNames name the steps of the section's handlers, in the order run.
var stepNames = []string{"first", "second", "third"}

// stepsRow is one row of the steps table: a handler that makes steps
// no-op framework.Step calls in turn, or as many framework.StepTx calls
// when tx is set, each in a transaction of its own on the worker's pool.
type stepsRow struct {
	driver string // "pgx" or "pq"
	steps  int    // zero: a handler without steps, the reference of its driver's ratios
	tx     bool
}

func (r stepsRow) label() string {
	switch {
	case r.steps == 0:
		return "leasework " + r.driver + ", no steps"
	case r.tx:
		return fmt.Sprintf("leasework %s, %d StepTx", r.driver, r.steps)
	case r.steps == 1:
		return "leasework " + r.driver + ", 1 Step"
	}
	return fmt.Sprintf("leasework %s, %d Steps", r.driver, r.steps)
}

// stepsRows are the section's rows, in print order: per driver, no steps,
// then 1 and 3 Step calls, then 3 StepTx calls.
func stepsRows() []stepsRow {
	var rows []stepsRow
	for _, drv := range []string{"pgx", "pq"} {
		rows = append(rows,
			stepsRow{driver: drv},
			stepsRow{driver: drv, steps: 1},
			stepsRow{driver: drv, steps: len(stepNames)},
			stepsRow{driver: drv, steps: len(stepNames), tx: true},
		)
	}
	return rows
}

// handlerErrors counts the errors a run's handlers returned, and keeps
// the first.
type handlerErrors struct {
	mu    sync.Mutex
	n     int
	first error
}

func (h *handlerErrors) add(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.first = err
	}
	h.n++
}

// handler returns the row's handler, which counts its errors in errs; db
// is the worker's pool, on which a StepTx handler begins its transactions.
func (r stepsRow) handler(db *sql.DB, errs *handlerErrors) leasework.Handler {
	return leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		for _, name := range stepNames[:r.steps] {
			noop := func(context.Context) (int64, error) { return c.ID, nil }
			var err error
			if r.tx {
				err = stepTx(ctx, db, name, noop)
			} else {
				_, err = framework.Step(ctx, name, noop)
			}
			if err != nil {
				errs.add(err)
				return err
			}
		}
		return nil
	})
}

// stepTx runs fn as step name in a transaction of its own on db, and
// commits it.
func stepTx(ctx context.Context, db *sql.DB, name string, fn func(context.Context) (int64, error)) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := framework.StepTx(ctx, tx, name, func(ctx context.Context, _ *sql.Tx) (int64, error) { return fn(ctx) }); err != nil {
		return err
	}
	return tx.Commit()
}

// stepsRun is one run of a row.
type stepsRun struct {
	res      runResult
	opened   int   // connections the worker's pool opened during the run
	again    int   // events that took more than one attempt
	errs     int   // errors the handlers returned
	firstErr error // the first of them
}

// runSteps enqueues n events, runs them through one worker at its
// defaults with the row's handler, and checks that every event was done
// with the row's steps recorded, counting those that took more than one
// attempt.
func runSteps(ctx context.Context, e *env, r stepsRow, n int) (stepsRun, error) {
	t, err := newLWTable(ctx, e, r.driver, lwShape{}, n)
	if err != nil {
		return stepsRun{}, err
	}
	defer t.close(e)
	pool := t.dbs[0]
	var errs handlerErrors
	before := connsOpened(pool.Stats())
	res, err := t.work(ctx, lwShape{}, n, runHooks{Handler: r.handler(pool, &errs)})
	opened := connsOpened(pool.Stats()) - before
	var again int
	if err == nil {
		again, err = t.checkSteps(ctx, r.steps, n)
	}
	t.closePools()
	if err != nil {
		return stepsRun{}, err
	}
	errs.mu.Lock()
	defer errs.mu.Unlock()
	return stepsRun{res: res, opened: opened, again: again, errs: errs.n, firstErr: errs.first}, nil
}

// connsOpened is how many connections a pool has opened, as far as its
// statistics tell: those open and those it closed for being idle or old.
func connsOpened(s sql.DBStats) int {
	return s.OpenConnections + int(s.MaxIdleClosed+s.MaxIdleTimeClosed+s.MaxLifetimeClosed)
}

// checkSteps fails unless each of the table's n events is DONE with want
// steps recorded, and returns how many took more than one attempt: a
// step that failed made its event run again, and the run's figure then
// counts the retry's wait.
func (t *lwTable) checkSteps(ctx context.Context, want, n int) (again int, err error) {
	var good int
	err = t.store.DB().QueryRowContext(ctx, `SELECT
        count(*) FILTER (WHERE status = 'DONE' AND (SELECT count(*) FROM jsonb_object_keys(steps)) = $1),
        count(*) FILTER (WHERE attempt > 1)
        FROM `+t.store.QualifiedTable(), want).Scan(&good, &again)
	if err != nil {
		return 0, fmt.Errorf("check the steps: %w", err)
	}
	if good != n {
		return 0, fmt.Errorf("%d of %d events done with %d steps recorded", good, n, want)
	}
	return again, nil
}

func steps(ctx context.Context, e *env) ([]table, error) {
	jobs, rounds := sizes(e)
	rows := stepsRows()
	rates := make([][]float64, len(rows))  // [row][round]
	opened := make([][]float64, len(rows)) // [row][round]
	again := make([]stepsRun, len(rows))   // per row, the events run again and the handlers' errors over the rounds
	for round := range rounds {
		// The same order each round, started at a different row, so that no
		// handler always follows the same one or runs first.
		shift := round * len(rows) / rounds
		for k := range rows {
			i := (k + shift) % len(rows)
			r := rows[i]
			run, err := runSteps(ctx, e, r, jobs)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.label(), err)
			}
			e.logf("steps round %d: %s: %s jobs/s, %d connections opened, %d events run again, %d handler errors",
				round+1, r.label(), thousands(run.res.Rate()), run.opened, run.again, run.errs)
			rates[i] = append(rates[i], run.res.Rate())
			opened[i] = append(opened[i], float64(run.opened))
			again[i].again += run.again
			again[i].errs += run.errs
			if again[i].firstErr == nil {
				again[i].firstErr = run.firstErr
			}
		}
	}
	return []table{stepsTable(e, rows, rates, opened, again, jobs, rounds)}, nil
}

// stepsTable prints the rates, rates[row][round], of the rows, the
// connections their worker's pool opened, opened[row][round], and the
// events run again and the handlers' errors, again[row], over the rounds.
func stepsTable(e *env, rows []stepsRow, rates, opened [][]float64, again []stepsRun, jobs, rounds int) table {
	t := table{
		title:  "Handlers of checkpointed steps against a handler without, through each driver: events enqueued up front, jobs/s",
		header: []string{"system", "configuration"},
	}
	for r := range rounds {
		t.header = append(t.header, fmt.Sprintf("round %d", r+1))
	}
	t.header = append(t.header, "median", "÷ no steps, same driver")
	none := map[string]float64{}
	for i, r := range rows {
		if r.steps == 0 {
			none[r.driver] = median(rates[i])
		}
	}
	ratios := map[string][]string{} // handler → "driver ratio"
	var handlers, conns, failed []string
	for i, r := range rows {
		name := strings.TrimPrefix(r.label(), "leasework ")
		conns = append(conns, fmt.Sprintf("%s %s", name, thousands(median(opened[i]))))
		if a := again[i]; a.again > 0 || a.errs > 0 {
			f := fmt.Sprintf("%s: %s events run again, %s handler errors", name, thousands(float64(a.again)), thousands(float64(a.errs)))
			if a.firstErr != nil {
				f += fmt.Sprintf(", the first: %q", a.firstErr.Error())
			}
			failed = append(failed, f)
		}
		cells := []string{r.label(), lwShape{}.String()}
		for _, x := range rates[i] {
			cells = append(cells, thousands(x))
		}
		m := median(rates[i])
		ratio := m / none[r.driver]
		cells = append(cells, thousands(m), fmt.Sprintf("%.2f", ratio))
		t.rows = append(t.rows, cells)
		if r.steps > 0 {
			h := strings.TrimPrefix(r.label(), "leasework "+r.driver+", ")
			if _, ok := ratios[h]; !ok {
				handlers = append(handlers, h)
			}
			ratios[h] = append(ratios[h], fmt.Sprintf("%s %.2f", r.driver, ratio))
		}
	}
	var reported []string
	for _, h := range handlers {
		reported = append(reported, h+" "+strings.Join(ratios[h], ", "))
	}
	t.notes = append(t.notes,
		"goal: none set; reported, each handler ÷ the handler without steps through the same driver: "+strings.Join(reported, "; "),
		fmt.Sprintf("%s events per run; %d rounds; every handler runs once per round, in one order started at a different run each round",
			thousands(float64(jobs)), rounds),
		fmt.Sprintf("the handlers: none returns nil; the others call %s (as many as the row says) in turn, each a function that returns the event's row id (an int64, a few bytes of JSON), then return nil. Step records each result under the guard (lease.Step) in the worker's batches of step records: the records made while one statement runs go together in the next; each StepTx is called in a transaction the handler begins on the worker's pool, which records the step in it and commits",
			strings.Join(stepNames, ", ")),
		"after each run, every event is checked DONE with its steps recorded (not timed)",
		fmt.Sprintf("connections the worker's pool opened in a run (median): %s. The pool is the driver's, as sql.DB opens it: no cap on its open connections and 2 kept idle, so a StepTx's transaction that finds no idle connection opens one, and a connection beyond the 2 is closed once it is done: a handler that begins its own transactions needs a pool sized for them (SetMaxIdleConns), or a Transactional handler, whose transactions Config.TxConcurrency bounds",
			strings.Join(conns, "; ")),
		failedNote(failed),
		settleNote(e),
		fmt.Sprintf("leasework defaults: framework.Config with only Schema and Logger set (Concurrency %d, PollInterval %v, Lease %v, DONE rows kept %.0f h), one worker on a pool of its own opened by its driver; done when its Counters().Completed reach the events",
			framework.DefaultConcurrency, framework.DefaultPollInterval, framework.DefaultLease, framework.DefaultRetention.Hours()),
	)
	if e.quick {
		t.notes = append(t.notes, "-quick: few events, figures are rough")
	}
	return t
}

// failedNote says which rows' events took more than one attempt, over all
// the rounds: each such event's run counts its retry's wait.
func failedNote(failed []string) string {
	if len(failed) == 0 {
		return "every event was done at its first attempt, in every run"
	}
	return "events run again after a failed attempt (the runs' figures count the retry's wait), over all rounds: " + strings.Join(failed, "; ")
}
