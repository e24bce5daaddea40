package pgx_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs every property of the suite through pgx, the
// dead-connection ones (DeadConn*) among them.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t)})
}

// The listener's connection is not one of the pool's: on a pool of one
// connection, statements still run while a listener listens, whoever opened
// the pool.
func TestOneConnListenLeavesThePool(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	cfg, err := pgxv5.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]func() (*sql.DB, error){
		"Driver.Open": func() (*sql.DB, error) { return pgxdriver.New().Open(dsn) },
		"sql.Open":    func() (*sql.DB, error) { return sql.Open("pgx", dsn) },
		"stdlib.OpenDB": func() (*sql.DB, error) {
			return stdlib.OpenDB(*cfg), nil
		},
	}
	for name, open := range pools {
		t.Run(name, func(t *testing.T) {
			db, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			channel := pgtest.SchemaName()
			l, err := pgxdriver.New().Listen(ctx, db, channel)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			qctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a liveness bound
			defer cancel()
			if _, err := db.ExecContext(qctx, `SELECT pg_notify($1, 'hello')`, channel); err != nil {
				t.Fatalf("a statement on the pool of one connection while listening: %v", err)
			}
			if payload, err := l.Wait(qctx); err != nil || payload != "hello" {
				t.Fatalf("Wait: %q, %v; want the notification", payload, err)
			}
		})
	}
}

// Listening on a pool of another driver fails with errors.ErrUnsupported,
// so callers know not to try again.
func TestListenOnAnotherDriversPool(t *testing.T) {
	db, err := sql.Open("postgres", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := pgxdriver.New().Listen(context.Background(), db, "leasework")
	if !errors.Is(err, errors.ErrUnsupported) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("listen on a lib/pq pool: %v; want errors.ErrUnsupported", err)
	}
}
