package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command line args the way main does and returns what it
// printed and its exit status.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// must runs args and fails the test unless the exit status is want.
func must(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := cli(t, args...)
	if r.code != want {
		t.Fatalf("leasework %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

// decode parses a command's -json output into v.
func decode(t *testing.T, r result, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode -json output: %v\n%s", err, r.stdout)
	}
}

// on returns args followed by the flags that point a command at st's table
// through the driver named driver.
func on(t *testing.T, st *lease.Store, driver string, args ...string) []string {
	t.Helper()
	return append(args, "-dsn", pgtest.DSN(t), "-driver", driver, "-schema", st.Schema(), "-table", st.Table())
}

// failed makes a FAILED row of kind with reason as its last error: enqueued
// with a budget of one attempt, claimed, failed.
func failed(t *testing.T, st *lease.Store, kind, reason string) int64 {
	t.Helper()
	ctx := context.Background()
	id := pgtest.Enqueue(t, st, lease.Event{Kind: kind, MaxAttempts: 1})[0].ID
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{kind}})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("claim row %d: %+v, %v", id, claims, err)
	}
	if _, err := st.Write(ctx, lease.Fail(claims[0].Ref(), reason)); err != nil {
		t.Fatal(err)
	}
	return id
}

func get(t *testing.T, st *lease.Store, id int64) lease.Row {
	t.Helper()
	row, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// freshSchema returns a schema name that nothing created yet, dropped at the
// end of the test in case a command created it.
func freshSchema(t *testing.T, db *sql.DB, drv leasework.Driver) string {
	t.Helper()
	schema := pgtest.SchemaName()
	st, err := lease.New(db, drv, lease.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.DropSchema(context.Background()); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return schema
}

func TestMissingDSNIsAUsageError(t *testing.T) {
	t.Setenv(pgserver.EnvDSN, "")
	for _, cmd := range []string{"migrate", "stats", "list", "requeue -all"} {
		r := must(t, exitUsage, strings.Fields(cmd)...)
		for _, want := range []string{"no database given", "-dsn", "$LEASEWORK_DSN"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("leasework %s without a DSN: stderr %q does not say %q", cmd, r.stderr, want)
			}
		}
		if r.stdout != "" {
			t.Errorf("leasework %s without a DSN printed on stdout: %q", cmd, r.stdout)
		}
	}
}

func TestDSNFromEnvironment(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	t.Setenv(pgserver.EnvDSN, pgtest.DSN(t))
	r := must(t, exitOK, "stats", "-json", "-schema", st.Schema())
	var got statsJSON
	decode(t, r, &got)
	if got.Schema != st.Schema() || len(got.Rows) != len(leasework.Statuses()) || got.Rows[leasework.StatusReady] != 0 {
		t.Fatalf("stats from $LEASEWORK_DSN = %+v", got)
	}
}

func TestUnreachableServerIsARuntimeError(t *testing.T) {
	t.Parallel()
	r := must(t, exitError, "stats", "-dsn", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if !strings.Contains(r.stderr, "leasework stats:") {
		t.Fatalf("stderr = %q; want the command named", r.stderr)
	}
}

func TestMissingTableSuggestsMigrate(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			drv := d.New()
			schema := freshSchema(t, pgtest.Open(t, drv), drv)
			r := must(t, exitError, "stats", "-dsn", pgtest.DSN(t), "-driver", d.Name, "-schema", schema)
			if !strings.Contains(r.stderr, "leasework migrate -schema "+schema) {
				t.Fatalf("stderr = %q; want a hint to run migrate", r.stderr)
			}
		})
	}
}
