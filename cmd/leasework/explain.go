package main

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

type explainCmd struct {
	limit int
	kinds kindList
	queue string
}

func (x *explainCmd) flags(fs *flag.FlagSet) {
	fs.IntVar(&x.limit, "limit", 100, "claim batch size to plan for")
	fs.StringVar(&x.queue, "queue", lease.DefaultQueue, "plan a claim of this `queue`")
	fs.Var(&x.kinds, "kind", "plan a claim restricted to this `kind` (repeatable; default every kind)")
}

func (x *explainCmd) check() error {
	if x.limit < 1 {
		return usagef("-limit is %d; it must be at least 1", x.limit)
	}
	return nil
}

type explainJSON struct {
	Schema        string   `json:"schema"`
	Table         string   `json:"table"`
	ClaimLimit    int      `json:"claim_limit"`
	Queue         string   `json:"queue"`
	ClaimedKinds  []string `json:"kinds"`
	SeqScans      int      `json:"seq_scans"`
	RowsDiscarded int64    `json:"rows_discarded_by_filters"`
	Plan          string   `json:"plan"`
}

// The plan's figures: EXPLAIN prints a node's rows removed by its filter as
// an average per loop, on the line after the node's (its loops count).
var (
	removedByFilter = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
	planLoops       = regexp.MustCompile(`loops=(\d+)\)`)
)

func (x *explainCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	plan, err := st.ExplainClaim(ctx, lease.ClaimRequest{Limit: x.limit, Lease: time.Minute, Kinds: x.kinds, Queue: x.queue})
	if err != nil {
		return err
	}
	// What makes a claim's cost grow with the table: sequential scans, and
	// rows read only to be thrown away.
	seqScans := strings.Count(plan, "Seq Scan")
	var discarded, loops int64
	for line := range strings.Lines(plan) {
		if m := planLoops.FindStringSubmatch(line); m != nil {
			loops, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := removedByFilter.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			discarded += n * max(loops, 1) // the average per loop, rounded: an estimate
		}
	}
	if out.json {
		kinds := x.kinds
		if kinds == nil {
			kinds = []string{}
		}
		return out.JSON(explainJSON{Schema: st.Schema(), Table: st.Table(), ClaimLimit: x.limit, Queue: x.queue,
			ClaimedKinds: kinds, SeqScans: seqScans, RowsDiscarded: discarded, Plan: plan})
	}
	scans := "sequential scans: none"
	if seqScans > 0 {
		scans = fmt.Sprintf("sequential scans: %d (cheap on a small table; on a large one, run ANALYZE on it and check its indexes)", seqScans)
	}
	return out.Linef("%s%s\nrows read and discarded by filters: %d", plan, scans, discarded)
}
