package main

import (
	"context"
	"flag"
	"time"

	"github.com/leasework/leasework/lease"
)

type statsCmd struct{}

func (*statsCmd) flags(*flag.FlagSet) {}

func (*statsCmd) check() error { return nil }

type statsJSON struct {
	Schema            string  `json:"schema"`
	Table             string  `json:"table"`
	Ready             int64   `json:"ready"`
	InProgress        int64   `json:"inprogress"`
	Done              int64   `json:"done"`
	Failed            int64   `json:"failed"`
	Eligible          int64   `json:"eligible"`
	ExpiredClaims     int64   `json:"expired_claims"`
	OldestEligibleAge float64 `json:"oldest_eligible_age_seconds"`
}

func (*statsCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	if out.json {
		return out.JSON(statsJSON{
			Schema: st.Schema(), Table: st.Table(),
			Ready: s.Ready, InProgress: s.InProgress, Done: s.Done, Failed: s.Failed,
			Eligible: s.Eligible, ExpiredClaims: s.ExpiredClaims,
			OldestEligibleAge: s.OldestEligibleAge.Seconds(),
		})
	}
	return out.Table(nil, [][]string{
		{"table", st.QualifiedTable()},
		{"READY", itoa(s.Ready)},
		{"INPROGRESS", itoa(s.InProgress)},
		{"DONE", itoa(s.Done)},
		{"FAILED", itoa(s.Failed)},
		{"eligible now", itoa(s.Eligible)},
		{"expired claims", itoa(s.ExpiredClaims)},
		{"oldest eligible age", s.OldestEligibleAge.Round(time.Millisecond).String()},
	})
}
