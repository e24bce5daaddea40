package main

import (
	"context"
	"flag"
	"time"

	"github.com/leasework/leasework/lease"
)

type queuesCmd struct{}

func (*queuesCmd) flags(*flag.FlagSet) {}

func (*queuesCmd) check() error { return nil }

type queueJSON struct {
	Name string `json:"name"`
	// PausedAt is when the queue was paused; null when it runs.
	PausedAt   *time.Time `json:"paused_at"`
	Ready      int64      `json:"ready"`
	Eligible   int64      `json:"eligible"`
	InProgress int64      `json:"inprogress"`
	Failed     int64      `json:"failed"`
	Waiting    int64      `json:"waiting"`
}

func toQueueJSON(q lease.QueueInfo) queueJSON {
	j := queueJSON{Name: q.Name, Ready: q.Ready, Eligible: q.Eligible, InProgress: q.InProgress, Failed: q.Failed, Waiting: q.Waiting}
	if !q.Paused.IsZero() {
		j.PausedAt = &q.Paused
	}
	return j
}

func (*queuesCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	qs, err := st.Queues(ctx)
	if err != nil {
		return err
	}
	if out.json {
		res := make([]queueJSON, len(qs))
		for i, q := range qs {
			res[i] = toQueueJSON(q)
		}
		return out.JSON(res)
	}
	rows := make([][]string, len(qs))
	for i, q := range qs {
		paused := "-"
		if !q.Paused.IsZero() {
			paused = q.Paused.UTC().Format(time.RFC3339)
		}
		rows[i] = []string{truncate(q.Name, keyWidth), paused, itoa(q.Ready), itoa(q.Eligible), itoa(q.InProgress), itoa(q.Failed), itoa(q.Waiting)}
	}
	return out.Table([]string{"QUEUE", "PAUSED", "READY", "ELIGIBLE", "INPROGRESS", "FAILED", "WAITING"}, rows)
}

// queueFlag is the -queue flag of pause and resume: required.
type queueFlag struct{ queue string }

func (q *queueFlag) flags(fs *flag.FlagSet) {
	fs.StringVar(&q.queue, "queue", "", "the `queue` (required)")
}

func (q *queueFlag) check() error {
	if q.queue == "" {
		return usagef("-queue is missing: name the queue")
	}
	if err := lease.ValidateQueue(q.queue); err != nil {
		return usagef("-queue: %v", err)
	}
	return nil
}

type pauseCmd struct{ queueFlag }

type pauseJSON struct {
	Queue   string `json:"queue"`
	Paused  bool   `json:"paused"`
	Changed bool   `json:"changed"` // false: it was already paused (pause), or it ran (resume)
}

func (p *pauseCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	ran, err := st.PauseQueue(ctx, p.queue)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(pauseJSON{Queue: p.queue, Paused: true, Changed: ran})
	}
	if !ran {
		return out.Linef("queue %s was already paused", p.queue)
	}
	return out.Linef("paused queue %s", p.queue)
}

type resumeCmd struct{ queueFlag }

func (r *resumeCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	was, err := st.ResumeQueue(ctx, r.queue)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(pauseJSON{Queue: r.queue, Paused: false, Changed: was})
	}
	if !was {
		return out.Linef("queue %s was not paused", r.queue)
	}
	return out.Linef("resumed queue %s", r.queue)
}
