package main

// The keyed section: keyed events against keyless ones, through each
// leasework driver, at the worker's defaults, in interleaved rounds.

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasework/leasework/framework"
)

// The keyed section's keys: events spread over keyedManyKeys keys, the
// goal's, and over keyedHotKeys hot keys, which run at most that many
// events at once and get a keyedHotShare of the events.
const (
	keyedManyKeys = 1000
	keyedHotKeys  = 10
	keyedHotShare = 5 // the hot keys' row runs jobs/keyedHotShare events
)

// keyedGoal is the goal of the events over keyedManyKeys keys: their
// median rate ÷ the keyless median of the same driver.
const keyedGoal = 0.8

// keyedRow is one row of the keyed table.
type keyedRow struct {
	driver string // "pgx" or "pq"
	shape  lwShape
	events int // events per run
}

func (r keyedRow) label() string {
	if r.shape.Keys == 0 {
		return "leasework " + r.driver + ", keyless"
	}
	return fmt.Sprintf("leasework %s, %s keys", r.driver, thousands(float64(r.shape.Keys)))
}

// keyedRows are the section's rows, in print order: per driver, keyless
// (the reference of that driver's ratios), then over keyedManyKeys keys,
// then over keyedHotKeys keys.
func keyedRows(jobs int) []keyedRow {
	var rows []keyedRow
	for _, drv := range []string{"pgx", "pq"} {
		rows = append(rows,
			keyedRow{drv, lwShape{}, jobs},
			keyedRow{drv, lwShape{Keys: keyedManyKeys}, jobs},
			keyedRow{drv, lwShape{Keys: keyedHotKeys}, keyedHotEvents(jobs)},
		)
	}
	return rows
}

// keyedHotEvents is how many events a run over the hot keys takes: a share
// of the others', since they run far slower.
func keyedHotEvents(jobs int) int { return max(jobs/keyedHotShare, keyedHotKeys) }

func init() { addSection("keyed", keyed) }

func keyed(ctx context.Context, e *env) ([]table, error) {
	jobs, rounds := sizes(e)
	rows := keyedRows(jobs)
	rates := make([][]float64, len(rows)) // [row][round]
	for round := range rounds {
		// The same order each round, started at a different row, so that no
		// configuration always follows the same one or runs first.
		shift := round * len(rows) / rounds
		for k := range rows {
			i := (k + shift) % len(rows)
			r := rows[i]
			res, err := leaseworkRunner(r.driver, r.shape)(ctx, e, r.events, runHooks{})
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", r.label(), r.shape, err)
			}
			e.logf("keyed round %d: %s: %s jobs/s", round+1, r.label(), thousands(res.Rate()))
			rates[i] = append(rates[i], res.Rate())
		}
	}
	return []table{keyedTable(e, rows, rates, jobs, rounds)}, nil
}

// keyedTable prints the rates, rates[row][round], of the rows.
func keyedTable(e *env, rows []keyedRow, rates [][]float64, jobs, rounds int) table {
	t := table{
		title:  "Keyed events against keyless, through each driver: no-op events enqueued up front, jobs/s",
		header: []string{"system", "configuration", "events"},
	}
	for r := range rounds {
		t.header = append(t.header, fmt.Sprintf("round %d", r+1))
	}
	t.header = append(t.header, "median", "÷ keyless, same driver")
	keyless := map[string]float64{}
	for i, r := range rows {
		if r.shape.Keys == 0 {
			keyless[r.driver] = median(rates[i])
		}
	}
	var goal, hot []string
	for i, r := range rows {
		cells := []string{r.label(), r.shape.String(), thousands(float64(r.events))}
		for _, x := range rates[i] {
			cells = append(cells, thousands(x))
		}
		m := median(rates[i])
		ratio := m / keyless[r.driver]
		cells = append(cells, thousands(m), fmt.Sprintf("%.2f", ratio))
		t.rows = append(t.rows, cells)
		switch r.shape.Keys {
		case keyedManyKeys:
			g := fmt.Sprintf("%s %.2f", r.driver, ratio)
			switch {
			case e.quick: // too few events a key to judge
			case ratio >= keyedGoal:
				g += " (held)"
			default:
				g += " (not held)"
			}
			goal = append(goal, g)
		case keyedHotKeys:
			hot = append(hot, fmt.Sprintf("%s %.2f", r.driver, ratio))
		}
	}
	t.notes = append(t.notes,
		fmt.Sprintf("goal: keyed over %s keys ÷ keyless ≥ %.1f, through each driver: %s; over %d hot keys: %s",
			thousands(keyedManyKeys), keyedGoal, strings.Join(goal, ", "), keyedHotKeys, strings.Join(hot, ", ")),
		fmt.Sprintf("%s events per run, %s over %d keys (1/%d of the events: a key's events run one at a time, so at most %d at once); %d rounds; every configuration runs once per round, in one order started at a different run each round",
			thousands(float64(jobs)), thousands(float64(keyedHotEvents(jobs))), keyedHotKeys, keyedHotShare, keyedHotKeys, rounds),
		fmt.Sprintf("event i has key i mod the keys (k0, k1, …), enqueued %s to a transaction; each key's events are handled in the order enqueued", thousands(enqueueBatch)),
		settleNote(e),
		fmt.Sprintf("leasework defaults: framework.Config with only Schema and Logger set (Concurrency %d, PollInterval %v, Lease %v, DONE rows kept %.0f h), one worker on a pool of its own opened by its driver; done when its Counters().Completed reach the events",
			framework.DefaultConcurrency, framework.DefaultPollInterval, framework.DefaultLease, framework.DefaultRetention.Hours()),
	)
	if e.quick {
		t.notes = append(t.notes, fmt.Sprintf("-quick: few events, %d a key or fewer over %s keys; figures are rough and the goal is not judged",
			(jobs+keyedManyKeys-1)/keyedManyKeys, thousands(keyedManyKeys)))
	}
	return t
}
