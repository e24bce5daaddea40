package lease

import (
	"context"
	"database/sql"
	"time"
)

// pauseSQL pauses queue $1: a row in the queues table, which the claim
// reads by its primary key. Pausing a paused queue keeps its first time.
const pauseSQL = `
INSERT INTO {{schema}}.{{name "queues"}} (queue) VALUES ($1)
ON CONFLICT (queue) DO NOTHING`

// resumeSQL resumes queue $1 and wakes idle workers on the table's channel
// ($2) with an empty payload, which every worker takes as "look again".
const resumeSQL = `
WITH resumed AS (
    DELETE FROM {{schema}}.{{name "queues"}} WHERE queue = $1 RETURNING queue
)
SELECT count(*) FROM resumed, pg_notify($2, '')`

// queuesSQL reads, per queue with unfinished rows or paused, its figures.
// It scans the table's unfinished rows.
const queuesSQL = `
SELECT COALESCE(c.queue, p.queue), p.paused_at,
    COALESCE(c.ready, 0), COALESCE(c.eligible, 0), COALESCE(c.in_progress, 0),
    COALESCE(c.failed, 0), COALESCE(c.waiting, 0)
FROM (
    SELECT queue,
        count(*) FILTER (WHERE status = 'READY') AS ready,
        count(*) FILTER (WHERE status = 'READY' AND next_attempt_at <= statement_timestamp()) AS eligible,
        count(*) FILTER (WHERE status = 'INPROGRESS') AS in_progress,
        count(*) FILTER (WHERE status = 'FAILED') AS failed,
        count(*) FILTER (WHERE status = 'WAITING') AS waiting
    FROM {{table}}
    WHERE status IN ('READY', 'INPROGRESS', 'FAILED', 'WAITING')
    GROUP BY queue
) AS c
FULL JOIN {{schema}}.{{name "queues"}} AS p ON p.queue = c.queue
ORDER BY 1`

// PauseQueue pauses queue (empty: [DefaultQueue]): from the moment it
// returns, claims take nothing from it, not even expired leases. Running
// handlers go on and record their outcomes; events can still be enqueued
// into it. A claim of a paused queue still ends FAILED the rows whose lease
// expired on their last allowed attempt, as every claim does: they could
// not run again anyway. It reports whether the queue ran: pausing a paused
// queue does nothing.
func (s *Store) PauseQueue(ctx context.Context, queue string) (bool, error) {
	queue, err := checkQueue("pause queue", queue)
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, s.q.pause, queue)
	if err != nil {
		return false, s.wrapErr("pause queue", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.wrapErr("pause queue", err)
	}
	return n > 0, nil
}

// ResumeQueue resumes a paused queue (empty: [DefaultQueue]) and wakes
// listening workers, so that its events are claimed at once. It reports
// whether the queue was paused.
func (s *Store) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	queue, err := checkQueue("resume queue", queue)
	if err != nil {
		return false, err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.resume, queue, s.channel).Scan(&n); err != nil {
		return false, s.wrapErr("resume queue", err)
	}
	return n > 0, nil
}

// QueueInfo is one queue's figures, as [Store.Queues] reads them.
type QueueInfo struct {
	Name string
	// Paused is when the queue was paused; zero when it runs.
	Paused time.Time
	// Ready counts its READY rows; Eligible, those due now.
	Ready, Eligible int64
	// InProgress counts its claimed rows, Failed its FAILED ones, Waiting
	// its keyed rows waiting behind an earlier one of their key.
	InProgress, Failed, Waiting int64
}

// Queues lists every queue that has unfinished rows (READY, INPROGRESS,
// FAILED, WAITING) or is paused, by name, with its figures. Like
// [Store.Stats] it scans the table's unfinished rows: call it at
// metrics-scrape rates, not per job.
func (s *Store) Queues(ctx context.Context) ([]QueueInfo, error) {
	rows, err := s.db.QueryContext(ctx, s.q.queues)
	if err != nil {
		return nil, s.wrapErr("queues", err)
	}
	defer rows.Close()
	var out []QueueInfo
	for rows.Next() {
		var q QueueInfo
		var paused sql.NullTime
		if err := rows.Scan(&q.Name, &paused, &q.Ready, &q.Eligible, &q.InProgress, &q.Failed, &q.Waiting); err != nil {
			return nil, s.wrapErr("queues", err)
		}
		if paused.Valid {
			q.Paused = paused.Time
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapErr("queues", err)
	}
	return out, nil
}
