package pq

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"

	"github.com/leasework/leasework"
	"github.com/lib/pq"
)

var _ leasework.Copier = Driver{}

// CopyFrom copies rows into columns of table with lib/pq's COPY … FROM
// STDIN (text format), prepared on tx: [leasework.Copier], with which the
// lease store enqueues large batches in a *sql.Tx. Each row is one Exec of
// the statement, which lib/pq encodes into a buffer and sends 64 KiB at a
// time; the last, without values, ends the COPY and waits for the server.
// The call is bounded by ctx as a statement is (see "Dead connections"),
// but for the cancel request: lib/pq sends none for a COPY, so the socket's
// deadline ends it.
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
	for _, row := range rows {
		if _, err := st.ExecContext(ctx, row...); err != nil {
			return 0, err
		}
	}
	res, err := st.ExecContext(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// copyStmt is lib/pq's COPY statement, bounded by the context of each
// Exec as the connection's other operations are (lib/pq's own Exec of it
// takes no context).
type copyStmt struct {
	driver.Stmt
	c *conn
}

func (s *copyStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	defer s.c.watch(ctx)()
	values := make([]driver.Value, len(args))
	for i, a := range args {
		values[i] = a.Value
	}
	//lint:ignore SA1019 lib/pq's COPY statement has Exec only
	return s.Stmt.Exec(values)
}
