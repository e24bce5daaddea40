package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/leasework/leasework"
)

// The read queries of an operator's overview (the web console's first
// page). They scan the table: call them at page-view rates, not per job.

// countsSQL counts the rows per queue, kind and status.
const countsSQL = `
SELECT queue, kind, status, count(*)
FROM {{table}}
GROUP BY queue, kind, status
ORDER BY queue, kind, status`

// throughputSQL counts the rows that finished DONE or FAILED in each of
// the last $1 minutes, the current one included, by the database clock: one
// row per minute, oldest first, zero for a minute without any. Each status
// is read through its partial index on finished_at (done_idx, failed_idx),
// from the first minute's start on: history older than the window is not
// read.
const throughputSQL = `
SELECT m.start, COALESCE(d.n, 0), COALESCE(f.n, 0)
FROM generate_series(date_trunc('minute', statement_timestamp()) - ($1::int - 1) * interval '1 minute',
        date_trunc('minute', statement_timestamp()), interval '1 minute') AS m(start)
LEFT JOIN (
    SELECT date_trunc('minute', finished_at) AS start, count(*) AS n
    FROM {{table}}
    WHERE status = 'DONE'
      AND finished_at >= date_trunc('minute', statement_timestamp()) - ($1::int - 1) * interval '1 minute'
    GROUP BY 1
) AS d ON d.start = m.start
LEFT JOIN (
    SELECT date_trunc('minute', finished_at) AS start, count(*) AS n
    FROM {{table}}
    WHERE status = 'FAILED'
      AND finished_at >= date_trunc('minute', statement_timestamp()) - ($1::int - 1) * interval '1 minute'
    GROUP BY 1
) AS f ON f.start = m.start
ORDER BY m.start`

// Count is the number of rows of one queue, kind and status, as
// [Store.Counts] reads them.
type Count struct {
	Queue  string
	Kind   string
	Status leasework.Status
	Rows   int64
}

// Counts returns the number of rows per queue, kind and status, in that
// order; combinations without rows are left out. Like [Store.Stats] it
// scans the table, finished rows included.
func (s *Store) Counts(ctx context.Context) ([]Count, error) {
	rows, err := s.db.QueryContext(ctx, s.render(countsSQL))
	if err != nil {
		return nil, s.wrapErr("counts", err)
	}
	defer rows.Close()
	out := []Count{}
	for rows.Next() {
		var c Count
		var status string
		if err := rows.Scan(&c.Queue, &c.Kind, &status, &c.Rows); err != nil {
			return nil, s.wrapErr("counts", err)
		}
		c.Status = leasework.Status(status)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("counts", err)
	}
	return out, nil
}

// Minute is one minute of [Store.Throughput]: the rows that finished DONE,
// and those that ended FAILED, within it.
type Minute struct {
	Start        time.Time // the minute's first instant, database clock
	Done, Failed int64
}

// MaxThroughputMinutes bounds [Store.Throughput]'s window: one day.
const MaxThroughputMinutes = 24 * 60

// Throughput returns, oldest first, one [Minute] for each of the last
// minutes, the current (partial) one included, by the database clock, with
// the rows that finished DONE and those that ended FAILED in it; a minute
// without any is there with zeros. minutes is from 1 to
// [MaxThroughputMinutes].
//
// It counts the rows as they are now, by their finish time: a DONE row
// deleted by retention, or a FAILED row requeued since, is no longer
// counted, and a row discarded after it failed counts as neither. It reads
// the finished rows of the window, scanning the table.
func (s *Store) Throughput(ctx context.Context, minutes int) ([]Minute, error) {
	if minutes < 1 || minutes > MaxThroughputMinutes {
		return nil, fmt.Errorf("lease: throughput: minutes is %d; it must be from 1 to %d", minutes, MaxThroughputMinutes)
	}
	rows, err := s.db.QueryContext(ctx, s.render(throughputSQL), minutes)
	if err != nil {
		return nil, s.wrapErr("throughput", err)
	}
	defer rows.Close()
	out := make([]Minute, 0, minutes)
	for rows.Next() {
		var m Minute
		if err := rows.Scan(&m.Start, &m.Done, &m.Failed); err != nil {
			return nil, s.wrapErr("throughput", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("throughput", err)
	}
	return out, nil
}
