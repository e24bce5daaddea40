package pq_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/lib/pq"
)

// lib/pq's messages start with "pq: ", as this package's do; wrapped in one
// of this package's, the prefix is said once, and errors.As still finds
// lib/pq's error.
func TestErrorsSayPqOnce(t *testing.T) {
	once := func(t *testing.T, err error, start string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error; want one starting with %q", start)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, start) || strings.Count(msg, "pq: ") != 1 {
			t.Errorf("error %q; want it to start with %q and say %q once", msg, start, "pq: ")
		}
	}

	t.Run("Open with a bad setting", func(t *testing.T) {
		_, err := pqdriver.New().Open("host=localhost port=abc")
		once(t, err, `pq: open: wrong value for "port"`)
	})

	t.Run("Listen to a missing database", func(t *testing.T) {
		db, err := pqdriver.New().Open(withDatabase(t, pgtest.DSN(t), "leasework_no_such_database"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		l, err := pqdriver.New().Listen(context.Background(), db, "leasework")
		if err == nil {
			l.Close()
		}
		once(t, err, "pq: listen: ")
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code != "3D000" {
			t.Errorf("error %q: errors.As finds %v; want lib/pq's invalid_catalog_name (3D000)", err, pqErr)
		}
	})
}

// withDatabase returns dsn, a URL or key=value connection string, naming
// database instead of its own.
func withDatabase(t *testing.T, dsn, database string) string {
	t.Helper()
	if !strings.Contains(dsn, "://") {
		return dsn + " dbname=" + database
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + database
	return u.String()
}
