package main

import (
	"context"
	"flag"

	"github.com/leasework/leasework/lease"
)

type cancelCmd struct {
	id     int64
	reason string
}

func (c *cancelCmd) flags(fs *flag.FlagSet) {
	fs.Int64Var(&c.id, "id", 0, "cancel the event of this row `id` (required)")
	fs.StringVar(&c.reason, "reason", "", "why, recorded as the row's last error after \"cancelled: \"")
}

func (c *cancelCmd) check() error {
	if c.id < 1 {
		return usagef("-id is %d; name the row with -id (a positive row id)", c.id)
	}
	return nil
}

type cancelJSON struct {
	ID         int64 `json:"id"`
	Generation int64 `json:"generation"` // the row's generation now
	// Stopping: an attempt runs the event; it ends DISCARDED once that
	// attempt stops or its lease ends.
	Stopping bool `json:"stopping"`
}

func (c *cancelCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	res, err := st.Cancel(ctx, c.id, c.reason)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(cancelJSON{ID: c.id, Generation: res.Generation, Stopping: res.Stopping})
	}
	if res.Stopping {
		return out.Linef("cancelled row %d: its running attempt (generation %d) is told to stop; the row ends DISCARDED, and its key passes on, once that attempt stops or its lease ends", c.id, res.Generation)
	}
	return out.Linef("cancelled row %d (now DISCARDED at generation %d)", c.id, res.Generation)
}
