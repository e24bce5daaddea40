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
	lastErrorWidth = 60
)

type listCmd struct {
	status string
	kind   string
	limit  int
	after  int64
}

func (l *listCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&l.status, "status", "", "only rows in this `status`: READY, INPROGRESS, DONE or FAILED (default any)")
	fs.StringVar(&l.kind, "kind", "", "only rows of this `kind` (default any)")
	fs.IntVar(&l.limit, "limit", 100, "print at most `N` rows")
	fs.Int64Var(&l.after, "after", 0, "only rows with an id greater than `ID`, for paging")
}

func (l *listCmd) check() error {
	if l.status != "" {
		s := leasework.Status(strings.ToUpper(l.status))
		if !s.Valid() {
			return usagef("-status %q is not a status; use READY, INPROGRESS, DONE or FAILED", l.status)
		}
		l.status = string(s)
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
}

type listJSON struct {
	Rows []rowJSON `json:"rows"`
	// NextAfter is the -after value of the next page; null when this page
	// was not full, so no more rows matched.
	NextAfter *int64 `json:"next_after"`
}

func (l *listCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	rows, err := st.List(ctx, lease.ListRequest{
		Status:  leasework.Status(l.status),
		Kind:    l.kind,
		AfterID: l.after,
		Limit:   l.limit,
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
			string(r.Status),
			itoa(r.Generation),
			fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts),
			timeCell(r.LeaseUntil),
			timeCell(&r.NextAttemptAt),
			orDash(truncate(r.LastError, lastErrorWidth)),
		}
	}
	header := []string{"ID", "EVENT ID", "KIND", "STATUS", "GEN", "ATTEMPT", "LEASE UNTIL", "NEXT ATTEMPT", "LAST ERROR"}
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
	}
}
