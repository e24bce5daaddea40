package pq

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// conn is a lib/pq connection whose operations are bounded: when the
// context of a statement, a transaction or a query whose rows are being
// read ends first, lib/pq sends the server a cancel request and keeps
// reading the socket for the answer; cancelGrace later the socket gets a
// deadline, so a server that never answers fails the operation instead of
// blocking it, and the connection is never used again.
//
// It forwards every interface of lib/pq's connection (pqConn), and wraps
// what holds the connection past a call: transactions, statements, rows.
type conn struct {
	pqConn
	socket net.Conn
	dead   atomic.Bool // an operation's context ended first: discard
}

// pqConn is what lib/pq's connection implements.
type pqConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// pqStmt and pqRows are what lib/pq's statements and rows implement.
type (
	pqStmt interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	pqRows interface {
		driver.Rows
		driver.RowsNextResultSet
		driver.RowsColumnTypeScanType
		driver.RowsColumnTypeDatabaseTypeName
		driver.RowsColumnTypeLength
		driver.RowsColumnTypePrecisionScale
	}
)

func wrapConn(dc driver.Conn, socket net.Conn) (driver.Conn, error) {
	pc, ok := dc.(pqConn)
	if !ok || socket == nil {
		dc.Close()
		return nil, fmt.Errorf("pq: connection %T lacks an interface of lib/pq's or its socket is unknown", dc)
	}
	return &conn{pqConn: pc, socket: socket}, nil
}

// watch bounds an operation by ctx until the returned stop is called.
func (c *conn) watch(ctx context.Context) (stop func()) {
	stopAfter := context.AfterFunc(ctx, func() {
		c.dead.Store(true)
		c.socket.SetDeadline(time.Now().Add(cancelGrace))
	})
	return func() { stopAfter() }
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	defer c.watch(ctx)()
	return c.pqConn.ExecContext(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	stop := c.watch(ctx)
	r, err := c.pqConn.QueryContext(ctx, query, args)
	return wrapRows(r, err, stop)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	stop := c.watch(ctx)
	defer stop()
	s, err := c.pqConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if ps, ok := s.(pqStmt); ok {
		return &stmt{pqStmt: ps, c: c}, nil
	}
	return &copyStmt{Stmt: s, c: c}, nil // a COPY: lib/pq's own, without contexts
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	stop := c.watch(ctx)
	t, err := c.pqConn.BeginTx(ctx, opts)
	if err != nil {
		stop()
		return nil, err
	}
	return &tx{Tx: t, stop: stop}, nil
}

func (c *conn) Ping(ctx context.Context) error {
	defer c.watch(ctx)()
	return c.pqConn.Ping(ctx)
}

func (c *conn) ResetSession(ctx context.Context) error {
	if c.dead.Load() {
		return driver.ErrBadConn
	}
	return c.pqConn.ResetSession(ctx)
}

func (c *conn) IsValid() bool { return !c.dead.Load() && c.pqConn.IsValid() }

// tx is bounded by its context until it commits or rolls back.
type tx struct {
	driver.Tx
	stop func()
}

func (t *tx) Commit() error {
	defer t.stop()
	return t.Tx.Commit()
}

func (t *tx) Rollback() error {
	defer t.stop()
	return t.Tx.Rollback()
}

type stmt struct {
	pqStmt
	c *conn
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	defer s.c.watch(ctx)()
	return s.pqStmt.ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	stop := s.c.watch(ctx)
	r, err := s.pqStmt.QueryContext(ctx, args)
	return wrapRows(r, err, stop)
}

// rows are bounded by the query's context until they are closed.
type rows struct {
	pqRows
	stop func()
}

func wrapRows(r driver.Rows, err error, stop func()) (driver.Rows, error) {
	if err != nil {
		stop()
		return nil, err
	}
	pr, ok := r.(pqRows)
	if !ok {
		stop()
		r.Close()
		return nil, fmt.Errorf("pq: rows %T lack an interface of lib/pq's", r)
	}
	return &rows{pqRows: pr, stop: stop}, nil
}

func (r *rows) Close() error {
	defer r.stop()
	return r.pqRows.Close()
}
