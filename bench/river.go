package main

// River, set up the way every section measures it: each client in a schema
// of its own, migrated by rivermigrate, on a pool of its own, through either
// of River's drivers. A section builds one with newRiverClient, inserts
// with insertN or insertOne (or, through pgx, with the client's own
// InsertTx and its kin in a transaction of its pool), starts it, and stops
// it with stop, which also closes its pools.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/leasework/leasework/lease"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the job of every River run: riverbench's BenchmarkArgs, a
// no-op job with a number the caller may use (a sequence, a send time).
type riverArgs struct {
	Num int64 `json:"num"`
}

func (riverArgs) Kind() string { return "benchmark" }

// riverSettings configures a River client's fetching.
type riverSettings struct {
	name              string        // as printed: "bench settings", "defaults"
	maxWorkers        int           // of the default queue
	fetchCooldown     time.Duration // zero: River's default
	fetchPollInterval time.Duration // zero: River's default
}

var (
	// riverBench is River's own benchmark configuration, from
	// cmd/river/riverbench/river_bench.go (river.NewClient in
	// Benchmarker.Run): FetchCooldown 2ms, FetchPollInterval 20ms, 2,000
	// workers on the default queue.
	riverBench = riverSettings{"bench settings", 2000, 2 * time.Millisecond, 20 * time.Millisecond}

	// riverDefaults leaves fetching at River's defaults (FetchCooldown
	// 100ms, FetchPollInterval 1s). River has no default worker count: a
	// queue must name one; 100 is the figure of River's own examples.
	riverDefaults = riverSettings{"defaults", 100, 0, 0}
)

// riverInsertBatch is how many jobs one InsertMany carries: riverbench's
// insertBatchSize.
const riverInsertBatch = 5000

// riverOptions configures newRiverClient.
type riverOptions struct {
	Settings riverSettings
	// Work runs each job; nil is a no-op.
	Work func(ctx context.Context, job *river.Job[riverArgs]) error
	// Configure, when set, changes the client's configuration last (a
	// job timeout, a rescue delay), for sections that need more than
	// Settings.
	Configure func(*river.Config)
	// MaxConns is the size of the client's pool; zero means pgxpool's
	// default for either driver.
	MaxConns int32
}

// riverClient is one River client on pools of its own, in one schema.
type riverClient struct {
	driverName string  // "pgx" (riverpgxv5) or "postgres" (riverdatabasesql on lib/pq)
	schema     string  // holds River's tables
	db         *sql.DB // a database/sql view of the client's database, for the caller's queries

	// pgx and pool are the client and its pool when driverName is "pgx",
	// for inserts in the caller's own pgx transaction (InsertTx and its
	// kin); nil otherwise.
	pgx  *river.Client[pgx.Tx]
	pool *pgxpool.Pool

	start  func(context.Context) error
	halt   func(context.Context) error // stops the client
	insert func(context.Context, []river.InsertManyParams) error
	close  func() // closes the pools
	closed bool
}

// migrateRiver creates schema if needed and migrates River's tables into it
// with rivermigrate, over a short-lived pgx pool.
func migrateRiver(ctx context.Context, dsn, schema string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+lease.QuoteIdent(schema)); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Schema: schema,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

// newRiverClient returns a River client, not started, for the tables
// migrateRiver made in schema, through driverName: "pgx" is riverpgxv5 on a
// pgxpool with pgx's default size (as riverbench opens it); "postgres" is
// riverdatabasesql on a lib/pq pool of the same size, without a listener
// (riverdatabasesql.New: it polls). Both pools also set search_path to
// schema, as riverdatabasesql asks. opts.MaxConns, when set, sizes either
// pool instead.
func newRiverClient(ctx context.Context, driverName, dsn, schema string, opts riverOptions) (*riverClient, error) {
	dsn, err := withSearchPath(dsn, schema)
	if err != nil {
		return nil, err
	}
	work := opts.Work
	if work == nil {
		work = func(context.Context, *river.Job[riverArgs]) error { return nil }
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(work))
	cfg := &river.Config{
		FetchCooldown:     opts.Settings.fetchCooldown,
		FetchPollInterval: opts.Settings.fetchPollInterval,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: opts.Settings.maxWorkers}},
		Schema:            schema,
		Workers:           workers,
	}
	if opts.Configure != nil {
		opts.Configure(cfg)
	}
	c := &riverClient{driverName: driverName, schema: schema}
	switch driverName {
	case "pgx":
		poolCfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("river pgx pool: %w", err)
		}
		if opts.MaxConns > 0 {
			poolCfg.MaxConns = opts.MaxConns
		}
		pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
		if err != nil {
			return nil, fmt.Errorf("river pgx pool: %w", err)
		}
		c.db = stdlib.OpenDBFromPool(pool)
		c.close = func() { c.db.Close(); pool.Close() }
		c.pgx, err = bindRiver(c, riverpgxv5.New(pool), cfg)
		if err != nil {
			c.close()
			return nil, err
		}
		c.pool = pool
	case "postgres":
		db, err := openDB(ctx, "postgres", dsn)
		if err != nil {
			return nil, fmt.Errorf("river lib/pq pool: %w", err)
		}
		// pgxpool's default size, so both drivers get the same
		// connections; database/sql's default keeps only two idle and
		// would reconnect all the time.
		size := int(pgxDefaultMaxConns())
		if opts.MaxConns > 0 {
			size = int(opts.MaxConns)
		}
		db.SetMaxOpenConns(size)
		db.SetMaxIdleConns(size)
		c.db = db
		c.close = func() { db.Close() }
		if _, err := bindRiver(c, riverdatabasesql.New(db), cfg); err != nil {
			c.close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("river: unknown driver %q; want pgx or postgres", driverName)
	}
	return c, nil
}

// bindRiver makes the client for drv and gives c its methods, so that
// callers need not carry River's transaction type. It returns the client,
// for the inserts in a transaction of the driver's own type.
func bindRiver[TTx any](c *riverClient, drv riverdriver.Driver[TTx], cfg *river.Config) (*river.Client[TTx], error) {
	client, err := river.NewClient(drv, cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	c.start = client.Start
	c.halt = client.Stop
	c.insert = func(ctx context.Context, params []river.InsertManyParams) error {
		_, err := client.InsertMany(ctx, params)
		return err
	}
	return client, nil
}

// pgxDefaultMaxConns is the size pgxpool gives a pool whose DSN names none.
func pgxDefaultMaxConns() int32 {
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return 4
	}
	return cfg.MaxConns
}

// withSearchPath returns dsn, a URL, with search_path set to schema.
func withSearchPath(dsn, schema string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("river: the DSN must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Start starts working jobs.
func (c *riverClient) Start(ctx context.Context) error { return c.start(ctx) }

// Stop stops the client, waiting for its jobs and its completer, then
// closes its pools: nothing of it runs after Stop returns. Calling it again
// does nothing; a client never started is only closed.
func (c *riverClient) Stop(ctx context.Context) error {
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.halt(ctx) // River tolerates a stop without a start
	c.close()
	return err
}

// InsertN inserts n jobs numbered from first, in InsertMany batches of
// riverInsertBatch, each batch its own transaction.
func (c *riverClient) InsertN(ctx context.Context, first int64, n int) error {
	params := make([]river.InsertManyParams, 0, min(n, riverInsertBatch))
	for i := range n {
		params = append(params, river.InsertManyParams{Args: riverArgs{Num: first + int64(i)}})
		if len(params) == cap(params) || i == n-1 {
			if err := c.insert(ctx, params); err != nil {
				return fmt.Errorf("river insert: %w", err)
			}
			params = params[:0]
		}
	}
	return nil
}

// InsertOne inserts one job in a transaction of its own.
func (c *riverClient) InsertOne(ctx context.Context, args riverArgs) error {
	return c.insert(ctx, []river.InsertManyParams{{Args: args}})
}

// Completed counts the jobs the table shows completed.
func (c *riverClient) Completed(ctx context.Context) (int64, error) {
	var n int64
	err := c.db.QueryRowContext(ctx,
		"SELECT /* bench */ count(*) FROM "+lease.QuoteIdent(c.schema)+".river_job WHERE state = 'completed'").Scan(&n)
	return n, err
}

// dropRiverSchema drops schema and everything in it, River's or not,
// through a short-lived pool: for after a run, to keep the database small.
func dropRiverSchema(ctx context.Context, dsn, schema string) error {
	db, err := openDB(ctx, "pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+lease.QuoteIdent(schema)+" CASCADE")
	return err
}

// freshRiverSchema migrates River's tables into a fresh schema named
// from prefix, and returns it with the function that drops it (logging a
// failure to). A failed migration drops what it made.
func freshRiverSchema(ctx context.Context, e *env, prefix string) (schema string, drop func(), err error) {
	schema = freshSchema(prefix)
	drop = func() {
		if err := dropRiverSchema(context.Background(), e.dsn, schema); err != nil {
			e.logf("drop schema %s: %v", schema, err)
		}
	}
	if err := migrateRiver(ctx, e.dsn, schema); err != nil {
		drop()
		return "", nil, err
	}
	return schema, drop, nil
}
