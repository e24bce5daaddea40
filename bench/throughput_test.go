package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgserver"
)

// testEnv returns an env on a throwaway server like the program's own (with
// pg_stat_statements, so the server section's every figure is read),
// stopped at the end of the test.
func testEnv(t *testing.T) *env {
	t.Helper()
	srv, err := pgserver.StartWith(t.Context(), pgserver.Options{
		Settings: []string{"shared_preload_libraries=pg_stat_statements", "max_connections=500"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return &env{dsn: srv.DSN(), server: srv, jobs: 1000, rounds: 1, quick: true, log: io.Discard, logf: func(string, ...any) {}}
}

// Every throughput runner runs all its events, calls its hooks in order,
// and leaves no schema behind.
func TestRunners(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const n = 1200 // not a multiple of a claim or an insert batch
	runners := map[string]runner{
		"leasework pgx defaults":            leaseworkRunner("pgx", lwShape{}),
		"leasework pq 2x50":                 leaseworkRunner("pq", lwShape{Workers: 2, Concurrency: 50}),
		"leasework pgx delete":              leaseworkRunner("pgx", lwShape{Concurrency: 100, DeleteAtCompletion: true}),
		"river pgx bench settings":          riverRunner("pgx", riverBench),
		"river database/sql bench settings": riverRunner("postgres", riverBench),
		"bare loop":                         runBareLoop,
	}
	for name, run := range runners {
		t.Run(name, func(t *testing.T) {
			var calls []string
			hook := func(name string) func(context.Context) error {
				return func(context.Context) error { calls = append(calls, name); return nil }
			}
			res, err := run(ctx, e, n, runHooks{Before: hook("before"), After: hook("after"), Stopped: hook("stopped")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Jobs != n || res.Elapsed <= 0 {
				t.Errorf("result %+v, want %d jobs in a positive time", res, n)
			}
			if len(calls) != 3 || calls[0] != "before" || calls[1] != "after" || calls[2] != "stopped" {
				t.Errorf("hooks called %v, want before, after, stopped", calls)
			}
		})
	}
	assertNoBenchSchemas(t, e)
}

// The server probe reads every figure on a throwaway server.
func TestServerProbe(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := newServerProbe(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	defer p.db.Close()
	if p.statements != "" {
		t.Fatalf("pg_stat_statements unreadable: %s", p.statements)
	}
	c, err := p.measure(ctx, e, leaseworkRunner("pgx", lwShape{Concurrency: 100}), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if c.serverCPUErr != nil || c.walBytes <= 0 || c.commits <= 0 || c.xids <= 0 || c.calls <= 0 || c.execMS <= 0 || c.clientCPU <= 0 {
		t.Errorf("a figure is missing: %+v", c)
	}
}

// Pickup runners report one latency per event.
func TestPickupRunners(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for name, run := range map[string]pickupRunner{
		"leasework notify": pickupLeasework(false),
		"river bench":      pickupRiver(riverBench),
	} {
		ds, err := run(ctx, e, 3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(ds) != 3 {
			t.Errorf("%s: %d latencies, want 3", name, len(ds))
		}
		for _, d := range ds {
			if d <= 0 || d > 10*time.Second {
				t.Errorf("%s: latency %v", name, d)
			}
		}
	}
	assertNoBenchSchemas(t, e)
}

func assertNoBenchSchemas(t *testing.T, e *env) {
	t.Helper()
	db, err := openDB(t.Context(), "pgx", e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var left int
	err = db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'lw%' OR nspname LIKE 'river%'`).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas left behind", left)
	}
}
