package main

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/riverqueue/river"
)

// testDSN returns $LEASEWORK_DSN, or the DSN of a throwaway server stopped
// at the end of the test.
func testDSN(t *testing.T) string {
	t.Helper()
	if dsn := os.Getenv(pgserver.EnvDSN); dsn != "" {
		return dsn
	}
	srv, err := pgserver.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv.DSN()
}

// Both River drivers migrate, insert, work and stop in a schema of their
// own.
func TestRiverRoundTrip(t *testing.T) {
	dsn := testDSN(t)
	for _, driverName := range []string{"pgx", "postgres"} {
		t.Run(driverName, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			schema := freshSchema("river_test")
			if err := migrateRiver(ctx, dsn, schema); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := dropRiverSchema(context.Background(), dsn, schema); err != nil {
					t.Error(err)
				}
			}()
			var worked atomic.Int64
			c, err := newRiverClient(ctx, driverName, dsn, schema, riverOptions{
				Settings: riverBench,
				Work: func(context.Context, *river.Job[riverArgs]) error {
					worked.Add(1)
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop(context.Background())
			const n = riverInsertBatch + 7 // two batches
			if err := c.InsertN(ctx, 0, n); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				done, err := c.Completed(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if done == n {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%d of %d jobs completed, %d worked", done, n, worked.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if worked.Load() != n {
				t.Errorf("worked %d jobs, want %d", worked.Load(), n)
			}
		})
	}
}
