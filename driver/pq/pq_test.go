package pq_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"reflect"
	"syscall"
	"testing"

	"github.com/leasework/leasework/conformance"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/lib/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs every property of the suite through lib/pq, the
// dead-connection ones (DeadConn*) among them.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: pqdriver.New(), DSN: pgtest.DSN(t)})
}

// A pool opened by one Driver value can listen through another; a pool the
// package did not open is refused with errors.ErrUnsupported, every time, so
// that callers poll instead of trying again.
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

	connector, err := pq.NewConnector(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]func() (*sql.DB, error){
		"sql.Open":   func() (*sql.DB, error) { return sql.Open("postgres", pgtest.DSN(t)) },
		"sql.OpenDB": func() (*sql.DB, error) { return sql.OpenDB(connector), nil },
	}
	for name, open := range pools {
		db, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		l, err := pqdriver.New().Listen(ctx, db, s.Channel())
		if !errors.Is(err, errors.ErrUnsupported) {
			if l != nil {
				l.Close()
			}
			t.Errorf("listen on a pool opened by %s: %v; want errors.ErrUnsupported", name, err)
		}
	}
}

// The package's connections, statements and rows wrap lib/pq's and implement
// every optional database/sql/driver interface that lib/pq's do, so that
// database/sql treats them the same. (A transaction is only ever committed
// or rolled back.)
func TestDeadConnWrappersKeepLibPQInterfaces(t *testing.T) {
	// The deprecated forms (Execer, Queryer, ColumnConverter) are left out:
	// database/sql prefers the others.
	ifaces := []any{
		(*driver.Conn)(nil), (*driver.ConnBeginTx)(nil), (*driver.ConnPrepareContext)(nil),
		(*driver.ExecerContext)(nil), (*driver.QueryerContext)(nil), (*driver.Pinger)(nil),
		(*driver.SessionResetter)(nil), (*driver.Validator)(nil), (*driver.NamedValueChecker)(nil),
		(*driver.Stmt)(nil), (*driver.StmtExecContext)(nil), (*driver.StmtQueryContext)(nil),
		(*driver.Rows)(nil), (*driver.RowsNextResultSet)(nil), (*driver.RowsColumnTypeScanType)(nil),
		(*driver.RowsColumnTypeDatabaseTypeName)(nil), (*driver.RowsColumnTypeLength)(nil),
		(*driver.RowsColumnTypeNullable)(nil), (*driver.RowsColumnTypePrecisionScale)(nil),
	}
	check := func(what string, wrapper any) {
		t.Helper()
		inner := pqdriver.Inner(wrapper)
		if inner == nil {
			t.Fatalf("%s: %T is not this package's", what, wrapper)
		}
		for _, p := range ifaces {
			it := reflect.TypeOf(p).Elem()
			if reflect.TypeOf(inner).Implements(it) && !reflect.TypeOf(wrapper).Implements(it) {
				t.Errorf("%s: lib/pq's %T implements %v, this package's %T does not", what, inner, it, wrapper)
			}
		}
	}
	ctx := context.Background()
	db := pgtest.Open(t, pqdriver.New())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		check("connection", dc)
		s, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, `SELECT 1`)
		if err != nil {
			return err
		}
		defer s.Close()
		check("statement", s)
		r, err := s.(driver.StmtQueryContext).QueryContext(ctx, nil)
		if err != nil {
			return err
		}
		check("rows", r)
		return r.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// When the listener cannot connect, Listen says why, at once, instead of
// retrying until its bound.
func TestListenReportsAFailedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	db, err := pqdriver.New().Open("postgres://postgres@" + addr + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := pqdriver.New().Listen(context.Background(), db, "leasework")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("listen on a closed port: %v; want the connection refused", err)
	}
}
