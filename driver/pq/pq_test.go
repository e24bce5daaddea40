package pq_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/leasework/leasework/conformance"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs every property of the suite through lib/pq.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: pqdriver.New(), DSN: pgtest.DSN(t)})
}

// A pool opened by one Driver value can listen through another; a pool the
// package did not open is refused with an error, so workers poll instead.
func TestListenNeedsAPoolOpenedByThePackage(t *testing.T) {
	ctx := context.Background()
	s := pgtest.Store(t, pqdriver.New(), lease.Options{})
	l, err := pqdriver.New().Listen(ctx, s.DB(), s.Channel())
	if err != nil {
		t.Fatalf("listen on a pool opened by another Driver value: %v", err)
	}
	pgtest.Enqueue(t, s, lease.Event{Kind: "hello"})
	for {
		payload, err := l.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if payload == "hello" {
			break
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("postgres", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := pqdriver.New().Listen(ctx, other, s.Channel()); err == nil || !strings.Contains(err.Error(), "DSN is unknown") {
		t.Fatalf("listen on a foreign pool: %v; want an error about the unknown DSN", err)
	}
}
