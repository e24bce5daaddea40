package main

// The enqueue section: the producer's side. Events per second into the
// table when the caller's own transactions carry them (one business row and
// 1, 100 or 5,000 events in each), through each leasework driver and
// through River's inserts in the same run, and the time one event adds to
// the caller's transaction.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
)

func init() { addSection("enqueue", enqueueSection) }

const (
	// enqueueKeys is how many keys the keyed rows spread their events over.
	enqueueKeys = 1000

	// enqueueRunFor is how long the producers of one events/s run keep
	// starting transactions; each commits at least one.
	enqueueRunFor      = 1500 * time.Millisecond
	enqueueRunForQuick = 100 * time.Millisecond

	// enqueueSamples is how many transactions of each kind, with the
	// enqueue and without it, the latency table times per row, after
	// enqueueWarmUps unmeasured pairs.
	enqueueSamples      = 1000
	enqueueSamplesQuick = 20
	enqueueWarmUps      = 10
)

// enqueueBatches are the events per transaction of the events/s table.
// -quick takes a tenth of the largest: a keyed event's commit runs
// statements of its own, and one keyed transaction of the largest would
// take seconds.
var (
	enqueueBatches      = []int{1, 100, 5000}
	enqueueBatchesQuick = []int{1, 100, 500}
)

// ordersTable is the business table of the section's caller, in each
// system's schema: one row per transaction, the write an outbox event goes
// with.
const ordersTable = "bench_orders"

// createOrders creates the business table in schema.
func createOrders(ctx context.Context, exec func(ctx context.Context, query string) error, schema string) error {
	err := exec(ctx, `CREATE TABLE `+qualifiedOrders(schema)+` (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    amount_cents bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp()
)`)
	if err != nil {
		return fmt.Errorf("create %s: %w", ordersTable, err)
	}
	return nil
}

func qualifiedOrders(schema string) string {
	return lease.QuoteIdent(schema) + "." + lease.QuoteIdent(ordersTable)
}

// insertOrderSQL is the business write of every transaction; its row's id
// names the transaction's events.
func insertOrderSQL(schema string) string {
	return "INSERT INTO " + qualifiedOrders(schema) + " (customer, amount_cents) VALUES ($1, $2) RETURNING id"
}

// orderValues are the business row's values for the n-th transaction of a
// target.
func orderValues(n int64) (customer string, amountCents int64) {
	return "customer-" + strconv.FormatInt(n%enqueueKeys, 10), 100 + n%9900
}

// eventNumber numbers event j of the transaction whose business row is
// order, of perTx events each: unique in the run, and River's job number.
func eventNumber(order int64, perTx, j int) int64 { return order*int64(perTx) + int64(j) }

// eventPayload is an event's body: River's job arguments, encoded as River
// encodes them, so both systems carry the same bytes.
func eventPayload(num int64) ([]byte, error) { return json.Marshal(riverArgs{Num: num}) }

// enqueueTarget is one system set up for the section: a schema of its own
// holding its events table and the business table, on a pool of its own.
type enqueueTarget interface {
	// tx commits one caller's transaction: the business row, then events
	// events (none: the business write alone). It returns how long the
	// enqueue call took (zero without events), from the call to its
	// return, inside the transaction.
	tx(ctx context.Context, events int) (call time.Duration, err error)
	// stored counts the rows of the events table and of the business table.
	stored(ctx context.Context) (events, orders int64, err error)
	// settle prepares the tables for a timed run (see settle).
	settle(ctx context.Context, e *env) error
	// close closes the pool and drops the schema.
	close(e *env)
}

// enqueueRow is one row of the section's tables: a system and what its
// producers call.
type enqueueRow struct {
	perTx      int
	system     string // as printed
	call       string // as printed
	keyed      bool
	reference  bool // River's reference for this perTx, the ratios' denominator
	insertMany bool // River's InsertManyTx for this perTx, the second ratio's denominator
	open       func(ctx context.Context, e *env, conns int) (enqueueTarget, error)
}

// enqueueRows are the rows of the events/s table, perTx by perTx.
func enqueueRows(batches []int) []enqueueRow {
	var rows []enqueueRow
	for _, n := range batches {
		rows = append(rows, lwEnqueueRows(n)...)
		if n == 1 {
			rows = append(rows, enqueueRow{perTx: n, system: "River pgx (riverpgxv5)", call: "InsertTx", reference: true, open: openRiverEnqueue(riverInsertTx)})
			continue
		}
		rows = append(rows,
			enqueueRow{perTx: n, system: "River pgx (riverpgxv5)", call: "InsertManyTx", insertMany: true, open: openRiverEnqueue(riverInsertManyTx)},
			enqueueRow{perTx: n, system: "River pgx (riverpgxv5)", call: "InsertManyFastTx (COPY)", reference: true, open: openRiverEnqueue(riverInsertManyFastTx)},
		)
	}
	return rows
}

// lwEnqueueRows are leasework's rows for perTx events a transaction:
// through each driver, keyless and keyed, failing on and skipping
// duplicates, with one INSERT each transaction; and, for more than one
// event a transaction, the same through COPY: lib/pq's in a *sql.Tx, and
// pgx's in a pgx.Tx of a pgxpool (driver/pgx's WrapTx and EnqueueTx).
func lwEnqueueRows(perTx int) []enqueueRow {
	var rows []enqueueRow
	paths := []lwPath{{drv: "pgx", copyMin: -1}, {drv: "pq", copyMin: -1}}
	if perTx > 1 {
		paths = append(paths, lwPath{drv: "pq", copyMin: 1}, lwPath{drv: "pgx", copyMin: 1, pgxTx: true})
	}
	for _, p := range paths {
		for _, keyed := range []bool{false, true} {
			for _, skip := range []bool{false, true} {
				rows = append(rows, enqueueRow{perTx: perTx, system: p.system(), call: p.call(skip), keyed: keyed,
					open: openLWEnqueue(p, keyed, lease.EnqueueOptions{SkipDuplicates: skip})})
			}
		}
	}
	return rows
}

// lwPath is how a leasework row's producers enqueue: through which driver,
// with which Options.EnqueueCopyMin (-1: the INSERT; 1: COPY for every
// batch), and whether in a pgx.Tx of a pgxpool instead of a *sql.Tx.
type lwPath struct {
	drv     string
	copyMin int
	pgxTx   bool
}

func (p lwPath) system() string {
	if p.pgxTx {
		return "leasework pgx.Tx"
	}
	return "leasework " + p.drv
}

func (p lwPath) call(skip bool) string {
	call := "Enqueue"
	if p.pgxTx {
		call = "EnqueueTx"
	} else if skip {
		call = "EnqueueWith"
	}
	if skip {
		call += " SkipDuplicates"
	}
	if p.copyMin > 0 {
		call += " (COPY)"
	}
	return call
}

func (r enqueueRow) keys() string {
	if r.keyed {
		return thousands(enqueueKeys)
	}
	return "none"
}

func (r enqueueRow) name() string {
	return fmt.Sprintf("%d/tx %s %s, keys %s", r.perTx, r.system, r.call, r.keys())
}

// lwEnqueue is a leasework table and the business table in a fresh schema.
type lwEnqueue struct {
	store       *lease.Store
	pool        *pgxpool.Pool // the producers' transactions, when they are pgx.Tx; nil: the store's pool
	opts        lease.EnqueueOptions
	keyed       bool
	insertOrder string
	next        atomic.Int64 // transactions begun, for the business row's values
}

// openLWEnqueue opens a pool of conns connections through the path's
// driver (and, for a pgx.Tx, a pgxpool of conns connections, which the
// producers use instead) and migrates a table in a fresh schema, beside
// the business table.
func openLWEnqueue(p lwPath, keyed bool, opts lease.EnqueueOptions) func(ctx context.Context, e *env, conns int) (enqueueTarget, error) {
	return func(ctx context.Context, e *env, conns int) (_ enqueueTarget, err error) {
		db, drv, err := openLeaseDB(p.drv, e.dsn)
		if err != nil {
			return nil, err
		}
		s, err := lease.New(db, drv, lease.Options{Schema: freshSchema("lw"), EnqueueCopyMin: p.copyMin})
		if err != nil {
			db.Close()
			return nil, err
		}
		t := &lwEnqueue{store: s, opts: opts, keyed: keyed, insertOrder: insertOrderSQL(s.Schema())}
		defer func() {
			if err != nil {
				t.close(e)
			}
		}()
		if p.pgxTx {
			cfg, err := pgxpool.ParseConfig(e.dsn)
			if err != nil {
				return nil, err
			}
			cfg.MaxConns = int32(conns)
			if t.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
				return nil, err
			}
		}
		if _, err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		exec := func(ctx context.Context, q string) error { _, err := db.ExecContext(ctx, q); return err }
		if err := createOrders(ctx, exec, s.Schema()); err != nil {
			return nil, err
		}
		// As many connections as producers, all kept: database/sql keeps
		// two idle by default and would reconnect all the time.
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		return t, nil
	}
}

func (t *lwEnqueue) tx(ctx context.Context, events int) (call time.Duration, err error) {
	if t.pool != nil {
		return t.pgxTx(ctx, events)
	}
	tx, err := t.store.DB().BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // after Commit, does nothing
	var order int64
	customer, amount := orderValues(t.next.Add(1))
	if err := tx.QueryRowContext(ctx, t.insertOrder, customer, amount).Scan(&order); err != nil {
		return 0, fmt.Errorf("business insert: %w", err)
	}
	if events > 0 {
		batch, err := t.batch(order, events)
		if err != nil {
			return 0, err
		}
		called := time.Now()
		if _, err := t.store.EnqueueWith(ctx, tx, t.opts, batch...); err != nil {
			return 0, err
		}
		call = time.Since(called)
	}
	return call, tx.Commit()
}

// pgxTx is tx in a pgx.Tx of the target's pgxpool, the events enqueued by
// EnqueueTx through driver/pgx's WrapTx.
func (t *lwEnqueue) pgxTx(ctx context.Context, events int) (call time.Duration, err error) {
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) // after Commit, does nothing
	var order int64
	customer, amount := orderValues(t.next.Add(1))
	if err := tx.QueryRow(ctx, t.insertOrder, customer, amount).Scan(&order); err != nil {
		return 0, fmt.Errorf("business insert: %w", err)
	}
	if events > 0 {
		batch, err := t.batch(order, events)
		if err != nil {
			return 0, err
		}
		called := time.Now()
		if _, err := t.store.EnqueueTx(ctx, lwpgx.WrapTx(tx), t.opts, batch...); err != nil {
			return 0, err
		}
		call = time.Since(called)
	}
	return call, tx.Commit(ctx)
}

// batch is the events of the transaction whose business row is order.
func (t *lwEnqueue) batch(order int64, events int) ([]lease.Event, error) {
	batch := make([]lease.Event, events)
	for j := range batch {
		num := eventNumber(order, events, j)
		payload, err := eventPayload(num)
		if err != nil {
			return nil, err
		}
		batch[j] = lease.Event{Kind: benchKind, EventID: "order-" + strconv.FormatInt(order, 10) + "-" + strconv.Itoa(j), Payload: payload}
		if t.keyed {
			batch[j].Key = "key-" + strconv.FormatInt(num%enqueueKeys, 10)
		}
	}
	return batch, nil
}

func (t *lwEnqueue) stored(ctx context.Context) (events, orders int64, err error) {
	err = t.store.DB().QueryRowContext(ctx,
		"SELECT (SELECT count(*) FROM "+t.store.QualifiedTable()+"), (SELECT count(*) FROM "+qualifiedOrders(t.store.Schema())+")").Scan(&events, &orders)
	return events, orders, err
}

func (t *lwEnqueue) settle(ctx context.Context, e *env) error {
	return settle(ctx, e, t.store.DB(), t.store.QualifiedTable())
}

func (t *lwEnqueue) close(e *env) {
	if t.pool != nil {
		t.pool.Close()
	}
	t.store.DB().Close()
	if err := dropRiverSchema(context.Background(), e.dsn, t.store.Schema()); err != nil {
		e.logf("drop schema %s: %v", t.store.Schema(), err)
	}
}

// riverInsert is one of River's inserts in the caller's transaction.
type riverInsert int

const (
	riverInsertTx         riverInsert = iota // InsertTx: one job
	riverInsertManyTx                        // InsertManyTx: one INSERT … SELECT unnest, returning the rows
	riverInsertManyFastTx                    // InsertManyFastTx: COPY FROM, returning a count
)

// riverEnqueue is River's tables and the business table in a fresh schema,
// with a client that is never started: a producer that inserts only.
type riverEnqueue struct {
	c           *riverClient
	insert      riverInsert
	insertOrder string
	next        atomic.Int64
}

// openRiverEnqueue migrates River's tables into a fresh schema, beside the
// business table, and opens a riverpgxv5 client on a pgx pool of conns
// connections: River's COPY insert is pgx's alone (riverdatabasesql's
// InsertManyFastTx is an INSERT … SELECT unnest).
func openRiverEnqueue(insert riverInsert) func(ctx context.Context, e *env, conns int) (enqueueTarget, error) {
	return func(ctx context.Context, e *env, conns int) (enqueueTarget, error) {
		schema, drop, err := freshRiverSchema(ctx, e, "river")
		if err != nil {
			return nil, err
		}
		c, err := newRiverClient(ctx, "pgx", e.dsn, schema, riverOptions{Settings: riverBench, MaxConns: int32(conns)})
		if err != nil {
			drop()
			return nil, err
		}
		t := &riverEnqueue{c: c, insert: insert, insertOrder: insertOrderSQL(schema)}
		exec := func(ctx context.Context, q string) error { _, err := c.pool.Exec(ctx, q); return err }
		if err := createOrders(ctx, exec, schema); err != nil {
			t.close(e)
			return nil, err
		}
		return t, nil
	}
}

func (t *riverEnqueue) tx(ctx context.Context, events int) (call time.Duration, err error) {
	tx, err := t.c.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) // after Commit, does nothing
	var order int64
	customer, amount := orderValues(t.next.Add(1))
	if err := tx.QueryRow(ctx, t.insertOrder, customer, amount).Scan(&order); err != nil {
		return 0, fmt.Errorf("business insert: %w", err)
	}
	if events > 0 {
		called := time.Now()
		params := make([]river.InsertManyParams, events)
		for j := range params {
			params[j].Args = riverArgs{Num: eventNumber(order, events, j)}
		}
		switch t.insert {
		case riverInsertTx:
			for _, p := range params {
				if _, err := t.c.pgx.InsertTx(ctx, tx, p.Args, nil); err != nil {
					return 0, fmt.Errorf("river InsertTx: %w", err)
				}
			}
		case riverInsertManyTx:
			if _, err := t.c.pgx.InsertManyTx(ctx, tx, params); err != nil {
				return 0, fmt.Errorf("river InsertManyTx: %w", err)
			}
		case riverInsertManyFastTx:
			if _, err := t.c.pgx.InsertManyFastTx(ctx, tx, params); err != nil {
				return 0, fmt.Errorf("river InsertManyFastTx: %w", err)
			}
		}
		call = time.Since(called)
	}
	return call, tx.Commit(ctx)
}

func (t *riverEnqueue) stored(ctx context.Context) (events, orders int64, err error) {
	err = t.c.pool.QueryRow(ctx,
		"SELECT (SELECT count(*) FROM "+lease.QuoteIdent(t.c.schema)+".river_job), (SELECT count(*) FROM "+qualifiedOrders(t.c.schema)+")").Scan(&events, &orders)
	return events, orders, err
}

func (t *riverEnqueue) settle(ctx context.Context, e *env) error {
	return settle(ctx, e, t.c.db, lease.QuoteIdent(t.c.schema)+".river_job")
}

func (t *riverEnqueue) close(e *env) {
	if err := t.c.Stop(context.Background()); err != nil {
		e.logf("river stop: %v", err)
	}
	if err := dropRiverSchema(context.Background(), e.dsn, t.c.schema); err != nil {
		e.logf("drop schema %s: %v", t.c.schema, err)
	}
}

// enqueueRun is one timed run of a row: the transactions and events its
// producers committed, and how long that took.
type enqueueRun struct {
	txs, events int64
	elapsed     time.Duration
}

// Rate is the run's events per second.
func (r enqueueRun) Rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

// runEnqueue sets the row's system up, warms up each of producers
// connections with a transaction of one event, settles the tables, then
// has producers goroutines commit transactions of row.perTx events until
// runFor has passed, each at least one. It checks that the tables hold
// every event and business row committed, and drops the schema.
func runEnqueue(ctx context.Context, e *env, row enqueueRow, producers int, runFor time.Duration) (enqueueRun, error) {
	t, err := row.open(ctx, e, producers)
	if err != nil {
		return enqueueRun{}, err
	}
	defer t.close(e)
	if err := concurrently(ctx, producers, func(ctx context.Context) (bool, error) { _, err := t.tx(ctx, 1); return false, err }); err != nil {
		return enqueueRun{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := t.settle(ctx, e); err != nil {
		return enqueueRun{}, err
	}
	var txs atomic.Int64
	begin := time.Now()
	err = concurrently(ctx, producers, func(ctx context.Context) (bool, error) {
		if _, err := t.tx(ctx, row.perTx); err != nil {
			return false, err
		}
		txs.Add(1)
		return time.Since(begin) < runFor, nil
	})
	res := enqueueRun{txs: txs.Load(), elapsed: time.Since(begin)}
	if err != nil {
		return enqueueRun{}, err
	}
	res.events = res.txs * int64(row.perTx)
	events, orders, err := t.stored(ctx)
	if err != nil {
		return enqueueRun{}, err
	}
	warmUps := int64(producers)
	if events != res.events+warmUps || orders != res.txs+warmUps {
		return enqueueRun{}, fmt.Errorf("%d transactions of %d events committed after %d of one: the tables hold %d events and %d business rows, want %d and %d",
			res.txs, row.perTx, warmUps, events, orders, res.events+warmUps, res.txs+warmUps)
	}
	return res, nil
}

// concurrently runs step in n goroutines, each until step reports false or
// fails; the first failure cancels the others' context and is returned.
func concurrently(ctx context.Context, n int, step func(ctx context.Context) (more bool, err error)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				more, err := step(ctx)
				if err != nil {
					cancel(err)
					return
				}
				if !more {
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// enqueueLatency is one row's latency figures: the transaction with the
// business write alone and with one event besides, timed in pairs.
type enqueueLatency struct {
	alone, with []time.Duration
	call        []time.Duration // the enqueue call alone, in the transactions with the event
}

// measureLatencies sets every row's system up, each on one connection,
// and times samples transactions of each kind per row: pair by pair, every
// row's pair in turn, so that a change of the machine's load falls on all
// rows alike, and within a row the pair's order alternates. Each time runs
// from the transaction's BEGIN to the return of its COMMIT. enqueueWarmUps
// pairs of each row go first, unmeasured; then the tables are settled.
func measureLatencies(ctx context.Context, e *env, rows []enqueueRow, samples int) (_ []enqueueLatency, err error) {
	targets := make([]enqueueTarget, 0, len(rows))
	defer func() {
		for _, t := range targets {
			t.close(e)
		}
	}()
	for _, r := range rows {
		t, err := r.open(ctx, e, 1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name(), err)
		}
		targets = append(targets, t)
	}
	out := make([]enqueueLatency, len(rows))
	for i := range enqueueWarmUps + samples {
		if i == enqueueWarmUps {
			for k, t := range targets {
				if err := t.settle(ctx, e); err != nil {
					return nil, fmt.Errorf("%s: %w", rows[k].name(), err)
				}
			}
		}
		kinds := [2]int{0, 1}
		if i%2 == 1 {
			kinds = [2]int{1, 0}
		}
		for k, t := range targets {
			for _, events := range kinds {
				began := time.Now()
				call, err := t.tx(ctx, events)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", rows[k].name(), err)
				}
				d := time.Since(began)
				switch {
				case i < enqueueWarmUps:
				case events == 0:
					out[k].alone = append(out[k].alone, d)
				default:
					out[k].with = append(out[k].with, d)
					out[k].call = append(out[k].call, call)
				}
			}
		}
	}
	n := int64(enqueueWarmUps + samples)
	for k, t := range targets {
		events, orders, err := t.stored(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rows[k].name(), err)
		}
		if events != n || orders != 2*n {
			return nil, fmt.Errorf("%s: the tables hold %d events and %d business rows, want %d and %d", rows[k].name(), events, orders, n, 2*n)
		}
	}
	return out, nil
}

// enqueueSizes are the section's sizes: smaller with -quick.
func enqueueSizes(e *env) (batches []int, runFor time.Duration, samples, rounds int) {
	if e.quick {
		return enqueueBatchesQuick, enqueueRunForQuick, enqueueSamplesQuick, 1
	}
	return enqueueBatches, enqueueRunFor, enqueueSamples, e.rounds
}

func enqueueSection(ctx context.Context, e *env) ([]table, error) {
	batches, runFor, samples, rounds := enqueueSizes(e)
	rows := enqueueRows(batches)
	rates := make([][]float64, len(rows)) // [row][round]
	for round := range rounds {
		// The same order each round, started at a different row, so that
		// no system always follows the same one or runs first.
		shift := round * len(rows) / rounds
		for k := range rows {
			i := (k + shift) % len(rows)
			res, err := runEnqueue(ctx, e, rows[i], e.producers, runFor)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rows[i].name(), err)
			}
			e.logf("enqueue round %d: %s: %s events/s (%d transactions)", round+1, rows[i].name(), thousands(res.Rate()), res.txs)
			rates[i] = append(rates[i], res.Rate())
		}
	}

	rt := table{
		title:  fmt.Sprintf("Enqueue: events/s into the table from %d producers, one business row and the events in each transaction", e.producers),
		header: []string{"events/tx", "system", "call", "keys"},
	}
	for r := range rounds {
		rt.header = append(rt.header, fmt.Sprintf("round %d", r+1))
	}
	rt.header = append(rt.header, "median events/s", "÷ River (InsertTx; InsertManyFastTx)", "÷ River InsertManyTx")
	reference := map[int]float64{}
	insertMany := map[int]float64{}
	for i, r := range rows {
		if r.reference {
			reference[r.perTx] = median(rates[i])
		}
		if r.insertMany {
			insertMany[r.perTx] = median(rates[i])
		}
	}
	for i, r := range rows {
		cells := []string{thousands(float64(r.perTx)), r.system, r.call, r.keys()}
		for _, x := range rates[i] {
			cells = append(cells, thousands(x))
		}
		m := median(rates[i])
		cells = append(cells, thousands(m), ratio(m, reference[r.perTx]), ratio(m, insertMany[r.perTx]))
		rt.rows = append(rt.rows, cells)
	}
	rt.notes = append(rt.notes,
		fmt.Sprintf("each run: a fresh schema with the system's table and a business table (%s: an identity key, two columns and a timestamp); %d producers, each on a connection of its own, commit transactions until %v have passed (each at least one); events/s is the events committed over the time until the last commit returned", ordersTable, e.producers, runFor),
		"each transaction: BEGIN, INSERT INTO bench_orders … RETURNING id, then the events of that order, then COMMIT; events carry stable ids (order-<id>-<n>) and River's job arguments as payload ({\"num\": n}, JSON-encoded as River encodes them)",
		fmt.Sprintf("keyed rows: event n of the run takes key n mod %s, so a transaction of 100 events holds 100 keys, one of more than %s holds every key, and concurrent producers wait for each other's commits on the keys they share; River has no keys, and its rows serve as the reference for both", thousands(enqueueKeys), thousands(enqueueKeys)),
		"before the clock each producer commits one transaction of one event (its connection opened, its statements prepared); then the tables are vacuumed and analysed and a throwaway server is checkpointed; after the run the tables are counted and must hold every event and business row committed",
		fmt.Sprintf("%d rounds; every row runs once per round, in one order started at a different row each round; the ratios are of the medians", rounds),
		"leasework: lease.Store.Enqueue, or EnqueueWith with lease.EnqueueOptions{SkipDuplicates: true} (no duplicates are sent: the cost of the check), in a database/sql transaction of the driver's pool, with as many connections as producers, all kept idle between transactions; rows without (COPY) send one INSERT (lease.Options.EnqueueCopyMin -1): … VALUES for one event, … SELECT unnest for more",
		fmt.Sprintf("leasework (COPY): the same calls with lease.Options.EnqueueCopyMin 1, so every batch is copied (the default, %d, copies the batches of 5,000 and leaves those of 100 to the INSERT); pq: lib/pq's COPY in the *sql.Tx; pgx.Tx: lease.Store.EnqueueTx in a pgx.Tx of a pgxpool of as many connections as producers, through driver/pgx's WrapTx (pgx's CopyFrom); pgx through database/sql has no COPY", lease.DefaultEnqueueCopyMin),
		fmt.Sprintf("River v0.51.2: a riverpgxv5 client (never started, its queue configured as in the throughput section) on a pgxpool of %d connections; the business insert and the jobs in one pgx.Tx; InsertManyFastTx is COPY FROM, riverdatabasesql has no COPY path and is left out; River's own reference per row: InsertTx for 1 event a transaction, InsertManyFastTx for the bulk rows", e.producers),
	)
	if e.quick {
		rt.notes = append(rt.notes, "-quick: runs of a moment, one round; figures are rough")
	}

	lt := table{
		title:  "Enqueue: the caller's transaction with one event and without it, one producer",
		header: []string{"system", "call", "keys", "alone p50", "alone p99", "with the event p50", "with the event p99", "added p50", "added p99", "the call p50", "the call p99"},
	}
	latencyRows := enqueueRows([]int{1})
	latencies, err := measureLatencies(ctx, e, latencyRows, samples)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	for k, r := range latencyRows {
		l := latencies[k]
		a50, a99 := percentile(l.alone, 50), percentile(l.alone, 99)
		w50, w99 := percentile(l.with, 50), percentile(l.with, 99)
		e.logf("enqueue latency: %s: alone p50 %s, with the event p50 %s", r.name(), ms(a50), ms(w50))
		lt.rows = append(lt.rows, []string{r.system, r.call, r.keys(), ms(a50), ms(a99), ms(w50), ms(w99), ms(w50 - a50), ms(w99 - a99),
			ms(percentile(l.call, 50)), ms(percentile(l.call, 99))})
	}
	lt.notes = append(lt.notes,
		fmt.Sprintf("per row, one connection times %d transactions of the business insert alone and %d with one event besides, in pairs whose order alternates; every row's pair in turn, after %d unmeasured pairs of each; from BEGIN to the return of COMMIT, so the commit's WAL flush (fsync on) is in every figure", samples, samples, enqueueWarmUps),
		"added: the difference of the percentiles, with the event minus alone: what the enqueue adds to the caller's transaction",
		"the call: the enqueue call alone (Enqueue, EnqueueWith, InsertTx), from the call to its return, in the transactions with the event: its round trips and the statement's work, without the commit; on a busy machine it tells a change of the statement's cost apart more surely than added, the difference of two noisy percentiles",
		"every row in a fresh schema of its own, all set up before the first pair, each system as in the events/s table; percentiles by nearest rank",
	)
	if e.quick {
		lt.notes = append(lt.notes, "-quick: few transactions, p99 is about the maximum")
	}
	return []table{rt, lt}, nil
}

// ratio formats x ÷ of, or "—" when there is nothing to divide by.
func ratio(x, of float64) string {
	if of == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", x/of)
}
