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

type statsCmd struct{}

func (*statsCmd) flags(*flag.FlagSet) {}

func (*statsCmd) check() error { return nil }

type statsJSON struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	// Rows counts the rows of each status, by its name: "READY", "DONE" …
	Rows              map[leasework.Status]int64 `json:"rows"`
	Eligible          int64                      `json:"eligible"`
	ExpiredClaims     int64                      `json:"expired_claims"`
	OldestEligibleAge float64                    `json:"oldest_eligible_age_seconds"`
	// HeldKeys counts the keys held by a FAILED event; Held names the
	// first few (list -held names them all).
	HeldKeys int64         `json:"held_keys"`
	Held     []heldKeyJSON `json:"held"`
	// PausedQueues names the paused queues (leasework queues lists every
	// queue with its figures).
	PausedQueues []string `json:"paused_queues"`
}

// shownHeld is how many held keys stats names.
const shownHeld = 5

func (*statsCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	held := []lease.HeldKey{}
	if s.HeldKeys > 0 {
		if held, err = st.HeldKeys(ctx, lease.HeldKeysRequest{Limit: shownHeld}); err != nil {
			return err
		}
	}
	queues, err := st.Queues(ctx)
	if err != nil {
		return err
	}
	paused := []string{}
	for _, q := range queues {
		if !q.Paused.IsZero() {
			paused = append(paused, q.Name)
		}
	}
	if out.json {
		res := statsJSON{
			PausedQueues: paused,
			Schema:       st.Schema(), Table: st.Table(),
			Rows:     s.Rows,
			Eligible: s.Eligible, ExpiredClaims: s.ExpiredClaims,
			OldestEligibleAge: s.OldestEligibleAge.Seconds(),
			HeldKeys:          s.HeldKeys, Held: make([]heldKeyJSON, len(held)),
		}
		for i, h := range held {
			res.Held[i] = toHeldJSON(h)
		}
		return out.JSON(res)
	}
	rows := [][]string{{"table", st.QualifiedTable()}}
	for _, status := range leasework.Statuses() {
		rows = append(rows, []string{string(status), itoa(s.Rows[status])})
	}
	rows = append(rows, [][]string{
		{"eligible now", itoa(s.Eligible)},
		{"expired claims", itoa(s.ExpiredClaims)},
		{"oldest eligible age", s.OldestEligibleAge.Round(time.Millisecond).String()},
		{"held keys", itoa(s.HeldKeys)},
	}...)
	for _, h := range held {
		rows = append(rows, []string{"  held", heldLine(h)})
	}
	if more := s.HeldKeys - int64(len(held)); more > 0 {
		rows = append(rows, []string{"", fmt.Sprintf("and %d more (leasework list -held)", more)})
	}
	pausedLine := "none"
	if len(paused) > 0 {
		pausedLine = strings.Join(paused, ", ")
	}
	rows = append(rows, []string{"paused queues", pausedLine})
	return out.Table(nil, rows)
}

// heldLine says in one line which key is held, by which row, and why.
func heldLine(h lease.HeldKey) string {
	return fmt.Sprintf("key %s: row %d (generation %d) FAILED: %s; %d waiting",
		truncate(h.Key, keyWidth), h.HeadID, h.Generation, truncate(h.LastError, lastErrorWidth), h.Waiting)
}
