package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The program itself, as `go run .` runs it (with the test's PostgreSQL):
// it starts an in-process broker, publishes and consumes every event, and
// with -redeliver shows one duplicate skipped by the consumer, and every
// customer's orders applied in order.
func TestRun(t *testing.T) {
	o := options{
		topic: "orders", dsn: pgtest.DSN(t), schema: pgtest.SchemaName(), group: "test",
		events: 6, customers: 2, partitions: 3, redeliver: true,
		deliveryTimeout: 10 * time.Second, timeout: time.Minute,
	}
	t.Cleanup(func() { dropSchema(t, o.schema) })
	var out, logs bytes.Buffer
	if err := run(t.Context(), o, &out, &logs); err != nil {
		t.Fatalf("run: %v\noutput:\n%s\nlogs:\n%s", err, out.String(), logs.String())
	}
	t.Logf("output:\n%s", out.String())
	for _, want := range []string{
		`no -brokers: started an in-process Kafka broker \(kfake\)`,
		`outbox rows DONE: +6 \(5 at generation 1, 1 at generation 2\)`,
		`records acknowledged by the broker: +7`,
		`records consumed: +7`,
		`effects applied: +6`,
		`duplicates skipped by the inbox: +1`,
		`applied out of a customer's order: +0`,
		`customer-1 has orders=3 total=\S+ last=#3`,
		`customer-2 has orders=3 total=\S+ last=#3`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := strings.Count(out.String(), "already in the inbox: skipped"); n != 1 {
		t.Errorf("output shows %d skipped duplicates; want 1", n)
	}
}

func dropSchema(t *testing.T, schema string) {
	drv := pgx.New()
	db := pgtest.Open(t, drv)
	s, err := lease.New(db, drv, lease.Options{Schema: schema})
	if err == nil {
		err = s.DropSchema(context.Background())
	}
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}
