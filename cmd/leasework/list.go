package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// Widths of the shortened cells of the table; -json prints them whole.
const (
	eventIDWidth   = 36 // a UUID fits
	keyWidth       = 24
	lastErrorWidth = 60
	previewWidth   = 60 // a step's value, an output
)

type listCmd struct {
	fs     *flag.FlagSet // to tell a flag given from its default
	status string
	kind   string
	queue  string
	part   string
	limit  int
	after  int64
	held   bool
	id     int64
}

func (l *listCmd) flags(fs *flag.FlagSet) {
	l.fs = fs
	fs.Int64Var(&l.id, "id", 0, "show the row with this `id` alone, every field in full, and why it is not running")
	fs.StringVar(&l.status, "status", "", "only rows in this `status`: READY, INPROGRESS, DONE, FAILED, WAITING or DISCARDED (default any)")
	fs.StringVar(&l.kind, "kind", "", "only rows of this `kind` (default any)")
	fs.StringVar(&l.queue, "queue", "", "only rows of this `queue` (default any)")
	fs.StringVar(&l.part, "partition", "", "only rows of this `partition` (default any, with a partition or not)")
	fs.IntVar(&l.limit, "limit", 100, "print at most `N` rows")
	fs.Int64Var(&l.after, "after", 0, "only rows with an id greater than `ID`, for paging")
	fs.BoolVar(&l.held, "held", false, "list the keys held by a FAILED event instead of rows: key, the FAILED row, its error, the events waiting")
}

func (l *listCmd) check() error {
	given := map[string]bool{}
	l.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["id"] {
		for _, f := range []string{"status", "kind", "queue", "partition", "limit", "after", "held"} {
			if given[f] {
				return usagef("-id shows one row: it takes no -%s", f)
			}
		}
		if l.id < 1 {
			return usagef("-id is %d; row ids are whole numbers from 1", l.id)
		}
		return nil
	}
	if l.status != "" {
		s := leasework.Status(strings.ToUpper(l.status))
		if !s.Valid() {
			return usagef("-status %q is not a status; use READY, INPROGRESS, DONE, FAILED, WAITING or DISCARDED", l.status)
		}
		l.status = string(s)
	}
	if l.held && (l.status != "" || l.kind != "" || l.queue != "" || l.part != "" || l.after != 0) {
		return usagef("-held lists keys, not rows: it takes no -status, -kind, -queue, -partition or -after")
	}
	if l.limit < 1 {
		return usagef("-limit is %d; it must be at least 1", l.limit)
	}
	if l.after < 0 {
		return usagef("-after is %d; it must not be negative", l.after)
	}
	return nil
}

type rowJSON struct {
	ID            int64      `json:"id"`
	EventID       string     `json:"event_id"`
	Kind          string     `json:"kind"`
	Key           string     `json:"key"`
	Status        string     `json:"status"`
	Generation    int64      `json:"generation"`
	Attempt       int        `json:"attempt"`
	MaxAttempts   int        `json:"max_attempts"`
	LeaseUntil    *time.Time `json:"lease_until"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastError     string     `json:"last_error"`
	Worker        string     `json:"worker"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	Queue         string     `json:"queue"`
	Priority      int        `json:"priority"`
	Partition     string     `json:"partition"` // "" for none
	// Cost is how many starts each attempt takes under rate limits.
	Cost int `json:"cost"`
}

type listJSON struct {
	Rows []rowJSON `json:"rows"`
	// NextAfter is the -after value of the next page; null when this page
	// was not full, so no more rows matched.
	NextAfter *int64 `json:"next_after"`
}

func (l *listCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	if l.held {
		return l.execHeld(ctx, st, out)
	}
	if l.id != 0 {
		return l.execOne(ctx, st, out)
	}
	rows, err := st.List(ctx, lease.ListRequest{
		Status:    leasework.Status(l.status),
		Kind:      l.kind,
		Queue:     l.queue,
		Partition: l.part,
		AfterID:   l.after,
		Limit:     l.limit,
	})
	if err != nil {
		return err
	}
	var next *int64
	if len(rows) == l.limit {
		last := rows[len(rows)-1].ID
		next = &last
	}
	if out.json {
		res := listJSON{Rows: make([]rowJSON, len(rows)), NextAfter: next}
		for i, r := range rows {
			res.Rows[i] = toRowJSON(r)
		}
		return out.JSON(res)
	}
	if len(rows) == 0 {
		return out.Linef("no rows")
	}
	table := make([][]string, len(rows))
	for i, r := range rows {
		table[i] = []string{
			itoa(r.ID),
			truncate(r.EventID, eventIDWidth),
			r.Kind,
			orDash(truncate(r.Key, keyWidth)),
			orDash(truncate(r.Partition, keyWidth)),
			string(r.Status),
			itoa(r.Generation),
			fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts),
			timeCell(r.LeaseUntil),
			nextOrFinished(r),
			orDash(truncate(r.LastError, lastErrorWidth)),
		}
	}
	header := []string{"ID", "EVENT ID", "KIND", "KEY", "PARTITION", "STATUS", "GEN", "ATTEMPT", "LEASE UNTIL", "NEXT ATTEMPT / FINISHED", "LAST ERROR"}
	if err := out.Table(header, table); err != nil {
		return err
	}
	if next != nil {
		return out.Linef("more rows may follow: add -after %d", *next)
	}
	return nil
}

func toRowJSON(r lease.Row) rowJSON {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return rowJSON{
		ID: r.ID, EventID: r.EventID, Kind: r.Kind, Key: r.Key, Status: string(r.Status),
		Generation: r.Generation, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LeaseUntil: utc(r.LeaseUntil), NextAttemptAt: r.NextAttemptAt.UTC(),
		LastError: r.LastError, Worker: r.Worker,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), FinishedAt: utc(r.FinishedAt),
		Queue: r.Queue, Priority: r.Priority, Partition: r.Partition, Cost: r.Cost,
	}
}

type heldKeyJSON struct {
	Key        string    `json:"key"`
	HeadID     int64     `json:"head_id"`
	EventID    string    `json:"event_id"`
	Kind       string    `json:"kind"`
	Generation int64     `json:"generation"`
	LastError  string    `json:"last_error"`
	FailedAt   time.Time `json:"failed_at"`
	Waiting    int64     `json:"waiting"`
}

func toHeldJSON(h lease.HeldKey) heldKeyJSON {
	return heldKeyJSON{Key: h.Key, HeadID: h.HeadID, EventID: h.EventID, Kind: h.Kind,
		Generation: h.Generation, LastError: h.LastError, FailedAt: h.FailedAt.UTC(), Waiting: h.Waiting}
}

type heldListJSON struct {
	Held []heldKeyJSON `json:"held"`
}

// execHeld lists the keys held by a FAILED event.
func (l *listCmd) execHeld(ctx context.Context, st *lease.Store, out *printer) error {
	held, err := st.HeldKeys(ctx, lease.HeldKeysRequest{Limit: l.limit})
	if err != nil {
		return err
	}
	if out.json {
		res := heldListJSON{Held: make([]heldKeyJSON, len(held))}
		for i, h := range held {
			res.Held[i] = toHeldJSON(h)
		}
		return out.JSON(res)
	}
	if len(held) == 0 {
		return out.Linef("no key is held by a FAILED event")
	}
	table := make([][]string, len(held))
	for i, h := range held {
		table[i] = []string{
			truncate(h.Key, keyWidth), itoa(h.HeadID), itoa(h.Generation), timeCell(&h.FailedAt),
			itoa(h.Waiting), orDash(truncate(h.LastError, lastErrorWidth)),
		}
	}
	header := []string{"KEY", "FAILED ROW", "GEN", "FAILED AT", "WAITING", "LAST ERROR"}
	if err := out.Table(header, table); err != nil {
		return err
	}
	return out.Linef("requeue the row (leasework requeue -id) or discard it (leasework discard -id -generation) to release its key")
}

// nextOrFinished is a row's next attempt, or, for a finished row (DONE,
// FAILED, DISCARDED), when it finished: a finished row has no next attempt.
func nextOrFinished(r lease.Row) string {
	if r.FinishedAt != nil {
		return "finished " + timeCell(r.FinishedAt)
	}
	return timeCell(&r.NextAttemptAt)
}

// reasonJSON is one reason a row is not running (lease.Reason); the
// fields after text are those of its kind.
type reasonJSON struct {
	// Kind is "limit", "partition", "rate", "paused", "key", "not_due"
	// or "fair".
	Kind string `json:"kind"`
	Text string `json:"text"`
	// limit and partition: the limit and its live attempts. For
	// partition: the partition's own limit, or the default (no name);
	// no scope, name, live or max when the limit was cleared since the
	// row was set aside; live counts the row's partition's attempts.
	// rate: the rate limit's scope ("kind", "queue" or "partition"), name
	// (none for the default rate limit of the partitions) and max.
	Scope string `json:"scope,omitempty"`
	Name  string `json:"name,omitempty"`
	Live  *int   `json:"live,omitempty"`
	Max   *int   `json:"max,omitempty"`
	// rate: the limit's period (a Go duration, and in microseconds), its
	// starts in the window that ends now, the row's cost, and when the
	// window first has room for that cost (null when the cost is more
	// than max: it never starts under the limit)
	Per    string     `json:"per,omitempty"`
	PerUS  int64      `json:"per_us,omitempty"`
	Recent *int       `json:"recent,omitempty"`
	Cost   *int       `json:"cost,omitempty"`
	NextAt *time.Time `json:"next_at,omitempty"`
	// partition, and rate of scope partition: the row's partition, and
	// whether the limit set it aside (WAITING without a key); fair: the
	// row's partition (absent for a row without one)
	Partition string `json:"partition,omitempty"`
	SetAside  *bool  `json:"set_aside,omitempty"`
	// paused, fair: the queue
	Queue    string     `json:"queue,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// key
	Key        string `json:"key,omitempty"`
	HeadID     *int64 `json:"head_id,omitempty"`
	HeadStatus string `json:"head_status,omitempty"`
	Ahead      *int   `json:"ahead,omitempty"`
	// fair, for a row of a partition: its partition's weight, and ahead
	// (above) how many rows it is ahead of the partition furthest behind
	Weight *int `json:"weight,omitempty"`
	// not due: null for a due time of infinity
	DueAt *time.Time `json:"due_at,omitempty"`
}

func toReasonJSON(r lease.Reason) reasonJSON {
	out := reasonJSON{Kind: string(r.Kind), Text: r.Text}
	switch r.Kind {
	case lease.ReasonLimit:
		out.Scope, out.Name, out.Live, out.Max = r.Limit.Scope, r.Limit.Name, &r.Live, &r.Limit.Max
	case lease.ReasonPartition:
		out.Partition, out.SetAside = r.Partition, &r.SetAside
		if r.Limit.Scope != "" {
			out.Scope, out.Name, out.Live, out.Max = r.Limit.Scope, r.Limit.Name, &r.Live, &r.Limit.Max
		}
	case lease.ReasonRate:
		out.Scope, out.Name, out.Max = r.Rate.Scope, r.Rate.Name, &r.Rate.Max
		out.Per, out.PerUS, out.Recent, out.Cost = r.Rate.Per.String(), r.Rate.Per.Microseconds(), &r.Recent, &r.Cost
		if !r.NextAt.IsZero() {
			at := r.NextAt.UTC()
			out.NextAt = &at
		}
		if r.Rate.Scope == lease.ScopePartition {
			out.Partition, out.SetAside = r.Partition, &r.SetAside
		}
	case lease.ReasonPaused:
		at := r.PausedAt.UTC()
		out.Queue, out.PausedAt = r.Queue, &at
	case lease.ReasonKey:
		out.Key, out.Ahead = r.Key, &r.Ahead
		if r.HeadID != 0 {
			out.HeadID, out.HeadStatus = &r.HeadID, string(r.HeadStatus)
		}
	case lease.ReasonFair:
		out.Queue, out.Partition = r.Queue, r.Partition
		if r.Partition != "" {
			out.Weight, out.Ahead = &r.Weight, &r.Ahead
		}
	case lease.ReasonNotDue:
		if !r.DueAt.IsZero() {
			at := r.DueAt.UTC()
			out.DueAt = &at
		}
	}
	return out
}

type oneRowJSON struct {
	Row rowJSON `json:"row"`
	// Why lists what keeps the row from running now; empty when nothing
	// does (it is claimable, running or finished).
	Why []reasonJSON `json:"why"`
	// Steps are the steps its handler recorded, in the order recorded;
	// empty when none. Output is its output (base64), null when none.
	Steps  []stepJSON `json:"steps"`
	Output []byte     `json:"output"`
}

// stepJSON is one recorded step (lease.StepRecord).
type stepJSON struct {
	Name       string    `json:"name"`
	Generation int64     `json:"generation"`
	At         time.Time `json:"at"`
	Value      []byte    `json:"value"` // base64
}

// execOne shows one row, every field in full, its steps and output, and
// why it is not running.
func (l *listCmd) execOne(ctx context.Context, st *lease.Store, out *printer) error {
	r, err := st.Get(ctx, l.id)
	if err != nil {
		return err
	}
	why, err := st.WhyNotRunning(ctx, l.id)
	if err != nil {
		return err
	}
	if out.json {
		res := oneRowJSON{Row: toRowJSON(r), Why: make([]reasonJSON, len(why)), Steps: make([]stepJSON, len(r.Steps)), Output: r.Output}
		for i, w := range why {
			res.Why[i] = toReasonJSON(w)
		}
		for i, st := range r.Steps {
			res.Steps[i] = stepJSON{Name: st.Name, Generation: st.Generation, At: st.At.UTC(), Value: st.Value}
		}
		return out.JSON(res)
	}
	rows := [][]string{
		{"id", itoa(r.ID)},
		{"event id", r.EventID},
		{"kind", r.Kind},
		{"queue", r.Queue},
		{"priority", itoa(int64(r.Priority))},
		{"key", orDash(r.Key)},
		{"partition", orDash(r.Partition)},
		{"cost", itoa(int64(r.Cost))},
		{"status", string(r.Status)},
		{"generation", itoa(r.Generation)},
		{"attempt", fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts)},
		{"worker", orDash(r.Worker)},
		{"lease until", timeCell(r.LeaseUntil)},
		{"next attempt", timeCell(&r.NextAttemptAt)},
		{"created", timeCell(&r.CreatedAt)},
		{"updated", timeCell(&r.UpdatedAt)},
		{"finished", timeCell(r.FinishedAt)},
		{"cancelled", timeCell(r.CancelledAt)},
		{"last error", orDash(r.LastError)},
	}
	// One line a step, its cells aligned with the other steps'.
	label := "steps"
	for _, st := range r.Steps {
		rows = append(rows, []string{label, st.Name, "generation " + itoa(st.Generation), timeCell(&st.At),
			bytesCell(len(st.Value)), preview(st.Value, previewWidth)})
		label = ""
	}
	if len(r.Steps) == 0 {
		rows = append(rows, []string{label, "-"})
	}
	if r.Output == nil {
		rows = append(rows, []string{"output", "-"})
	} else {
		o := bytesCell(len(r.Output))
		if len(r.Output) > 0 {
			o += ": " + preview(r.Output, previewWidth)
		}
		rows = append(rows, []string{"output", o})
	}
	label = "why not running"
	for _, w := range why {
		rows = append(rows, []string{label, w.Text})
		label = ""
	}
	if len(why) == 0 {
		rows = append(rows, []string{label, nothingHolds(r)})
	}
	return out.Table(nil, rows)
}

// nothingHolds says what becomes of row r, which nothing holds back.
func nothingHolds(r lease.Row) string {
	switch r.Status {
	case leasework.StatusReady:
		return fmt.Sprintf("nothing holds it back: the next claim of a worker that serves kind %s in queue %s takes it", r.Kind, r.Queue)
	case leasework.StatusInProgress:
		return fmt.Sprintf("it runs while its lease does (until %s); if its worker stops renewing it, the next claim of queue %s takes it once the lease has run out", timeCell(r.LeaseUntil), r.Queue)
	case leasework.StatusFailed:
		return fmt.Sprintf("it FAILED: requeue it (leasework requeue -id %d) or discard it (leasework discard -id %d -generation %d)", r.ID, r.ID, r.Generation)
	}
	return "it has finished: " + string(r.Status)
}
