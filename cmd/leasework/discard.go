package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

type discardCmd struct {
	id, generation int64
}

func (d *discardCmd) flags(fs *flag.FlagSet) {
	fs.Int64Var(&d.id, "id", 0, "discard the FAILED row with this `id` (required)")
	fs.Int64Var(&d.generation, "generation", 0, "the row's generation as `listed` (list -status FAILED, list -held); required: a row requeued and failed again since has a newer one and is not discarded")
}

func (d *discardCmd) check() error {
	if d.id < 1 {
		return usagef("-id is %d; name the FAILED row with -id (a positive row id)", d.id)
	}
	if d.generation < 1 {
		return usagef("-generation is %d; give the generation the row was listed with (a FAILED row's is at least 1: see leasework list -status FAILED)", d.generation)
	}
	return nil
}

type discardJSON struct {
	ID         int64  `json:"id"`
	Generation int64  `json:"generation"` // the row's new generation
	Key        string `json:"key"`        // the key it released, "" for none
	// Promoted is the row of the key made READY by the discard, or null
	// when none was waiting.
	Promoted *int64 `json:"promoted"`
}

func (d *discardCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	gen, err := st.Discard(ctx, leasework.Ref{ID: d.id, Generation: d.generation})
	if err != nil {
		return err
	}
	row, err := st.Get(ctx, d.id)
	if err != nil {
		return err
	}
	res := discardJSON{ID: d.id, Generation: gen, Key: row.Key}
	if row.Key != "" {
		next, err := st.KeyHead(ctx, row.Key)
		if err != nil {
			return err
		}
		if next != nil {
			res.Promoted = &next.ID
		}
	}
	if out.json {
		return out.JSON(res)
	}
	line := fmt.Sprintf("discarded row %d (generation now %d)", d.id, gen)
	switch {
	case res.Key == "":
	case res.Promoted != nil:
		line += fmt.Sprintf("; key %q released: row %d is next", res.Key, *res.Promoted)
	default:
		line += fmt.Sprintf("; key %q released: no event was waiting", res.Key)
	}
	return out.Linef("%s", line)
}
