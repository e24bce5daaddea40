package pq

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"

	"github.com/leasework/leasework"
	"github.com/lib/pq"
)

var _ leasework.Copier = Driver{}

// CopyFrom copies rows into columns of table with lib/pq's COPY … FROM
// STDIN (text format), prepared on tx: [leasework.Copier], with which the
// lease store enqueues large batches in a *sql.Tx. lib/pq encodes the rows
// into a buffer and sends it 64 KiB at a time; a last Exec, without
// values, ends the COPY and waits for the server. The call is bounded by
// ctx as a statement is (see "Dead connections"), but for the cancel
// request: lib/pq sends none for a COPY, so the socket's deadline ends it.
func (Driver) CopyFrom(ctx context.Context, tx *sql.Tx, table, columns []string, rows [][]any) (n int64, err error) {
	parts := make([]string, len(table))
	for i, p := range table {
		parts[i] = pq.QuoteIdentifier(p)
	}
	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = pq.QuoteIdentifier(c)
	}
	st, err := tx.PrepareContext(ctx, "COPY "+strings.Join(parts, ".")+" ("+strings.Join(cols, ", ")+") FROM STDIN")
	if err != nil {
		return 0, err
	}
	// After an error the COPY is ended (lib/pq sends CopyDone and reads
	// the server's answer, or finds the connection broken): Close reports
	// nothing of it, the error of the Exec that failed is the call's.
	defer st.Close()
	// All rows in one Exec: database/sql's own work per Exec (the
	// connection's lock, each value converted, the context watched) cost
	// as much as lib/pq's encoding of the row (see copyStmt). A pool of
	// lib/pq's own driver (sql.Open("postgres", …)) has no copyStmt:
	// database/sql refuses the batch before sending anything, and each row
	// is an Exec of its own.
	batch := &copyRows{rows: rows}
	if _, err := st.ExecContext(ctx, batch); err != nil {
		if batch.taken {
			return 0, err
		}
		for _, row := range rows {
			if _, err := st.ExecContext(ctx, row...); err != nil {
				return 0, err
			}
		}
	}
	res, err := st.ExecContext(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// copyRows is every row of a COPY as the one argument of an Exec of
// copyStmt, which marks it taken.
type copyRows struct {
	rows  [][]any
	taken bool
}

// copyStmt is lib/pq's COPY statement, bounded by the context of each
// Exec as the connection's other operations are (lib/pq's own Exec of it
// takes no context). An Exec whose one argument is copyRows sends each of
// them as a row; any other Exec is lib/pq's.
type copyStmt struct {
	driver.Stmt
	c *conn
}

// CheckNamedValue passes copyRows to ExecContext as they are, and leaves
// other values to database/sql's conversion.
func (s *copyStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if _, ok := nv.Value.(*copyRows); ok {
		return nil
	}
	return driver.ErrSkip
}

func (s *copyStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	defer s.c.watch(ctx)()
	if len(args) == 1 {
		if batch, ok := args[0].Value.(*copyRows); ok {
			batch.taken = true
			var values []driver.Value
			for _, row := range batch.rows {
				values = values[:0]
				for _, v := range row {
					values = append(values, v)
				}
				if len(values) == 0 {
					return nil, errors.New("pq: copy: a row without values")
				}
				//lint:ignore SA1019 lib/pq's COPY statement has Exec only
				if _, err := s.Stmt.Exec(values); err != nil {
					return nil, err
				}
			}
			return driver.RowsAffected(0), nil
		}
	}
	values := make([]driver.Value, len(args))
	for i, a := range args {
		values[i] = a.Value
	}
	//lint:ignore SA1019 lib/pq's COPY statement has Exec only
	return s.Stmt.Exec(values)
}
