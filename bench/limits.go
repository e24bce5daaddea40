package main

// The limits section: what concurrency limits cost when they do not bind,
// and how fully a binding one is used, through each leasework driver, in
// interleaved rounds.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

func init() { addSection("limits", limits) }

// The section's figures.
const (
	// limitsGoal is the goal of a run with limits declared that do not
	// bind: its median rate ÷ the median without limits, same driver.
	limitsGoal = 0.9
	// boundMax is the binding limit, on the kind of every event, of
	// boundWorkers workers each wanting boundConcurrency at once.
	boundMax         = 40
	boundWorkers     = 4
	boundConcurrency = 20
	boundHandler     = time.Millisecond
	// boundGoal is the goal of the binding limit's use: the mean of the
	// live attempts sampled during the run ÷ boundMax.
	boundGoal = 0.9
)

// looseLimits are declared and never bind: the most a kind and a queue
// may allow.
var looseLimits = []lease.Limit{
	{Scope: lease.ScopeKind, Name: benchKind, Max: lease.MaxLimit},
	{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: lease.MaxLimit},
}

// loosePartitions are how many partitions the events of the runs under a
// partition limit spread over, and loosePartitionLimit that limit: a
// default for every partition that never binds. A claim's cost under it
// grows with the partitions of its batch (each one's slot is locked,
// counted and written), not with its rows: the section measures two
// spreads.
var loosePartitions = []int{100, 10}

var loosePartitionLimit = []lease.Limit{{Scope: lease.ScopePartition, Max: lease.MaxLimit}}

// partitionCounts says loosePartitions in words: "100 or 10".
func partitionCounts() string {
	var ps []string
	for _, p := range loosePartitions {
		ps = append(ps, fmt.Sprint(p))
	}
	return strings.Join(ps, " or ")
}

func limits(ctx context.Context, e *env) ([]table, error) {
	jobs, rounds := sizes(e)
	type row struct {
		driver string
		shape  lwShape
	}
	var rows []row
	for _, drv := range []string{"pgx", "pq"} {
		rows = append(rows, row{drv, lwShape{}}, row{drv, lwShape{Limits: looseLimits}})
		for _, p := range loosePartitions {
			rows = append(rows, row{drv, lwShape{Partitions: p}}, row{drv, lwShape{Partitions: p, Limits: loosePartitionLimit}})
		}
	}
	rates := make([][]float64, len(rows))
	bound := make([][]boundRun, 2) // per driver
	boundShape := lwShape{Workers: boundWorkers, Concurrency: boundConcurrency,
		Limits: []lease.Limit{{Scope: lease.ScopeKind, Name: benchKind, Max: boundMax}}}
	boundJobs := max(jobs/4, 1000)
	for round := range rounds {
		shift := round * len(rows) / rounds
		for k := range rows {
			i := (k + shift) % len(rows)
			r := rows[i]
			res, err := leaseworkRunner(r.driver, r.shape)(ctx, e, jobs, runHooks{})
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", r.driver, r.shape, err)
			}
			e.logf("limits round %d: %s, %s: %s jobs/s", round+1, r.driver, r.shape, thousands(res.Rate()))
			rates[i] = append(rates[i], res.Rate())
		}
		for d, drv := range []string{"pgx", "pq"} {
			b, err := runBound(ctx, e, drv, boundShape, boundJobs)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", drv, boundShape, err)
			}
			e.logf("limits round %d: %s, %s: %s jobs/s, %.1f live of %d on average, most %d", round+1, drv, boundShape,
				thousands(b.res.Rate()), b.meanLive, boundMax, b.mostLive)
			bound[d] = append(bound[d], b)
		}
	}

	loose := table{
		title:  "Concurrency limits declared but not binding, against none: no-op events enqueued up front, jobs/s",
		header: []string{"system", "configuration"},
	}
	for r := range rounds {
		loose.header = append(loose.header, fmt.Sprintf("round %d", r+1))
	}
	loose.header = append(loose.header, "median", "÷ no limits, same driver")
	var goal []string
	for i, r := range rows {
		cells := []string{"leasework " + r.driver, r.shape.String()}
		for _, x := range rates[i] {
			cells = append(cells, thousands(x))
		}
		ref := median(rates[i-i%2])
		ratio := median(rates[i]) / ref
		cells = append(cells, thousands(median(rates[i])), fmt.Sprintf("%.2f", ratio))
		loose.rows = append(loose.rows, cells)
		if len(r.shape.Limits) > 0 {
			what := "kind and queue"
			if r.shape.Partitions > 0 {
				what = fmt.Sprintf("partition (%d)", r.shape.Partitions)
			}
			g := fmt.Sprintf("%s %s %.2f", r.driver, what, ratio)
			if !e.quick {
				g += map[bool]string{true: " (held)", false: " (not held)"}[ratio >= limitsGoal]
			}
			goal = append(goal, g)
		}
	}
	loose.notes = append(loose.notes,
		fmt.Sprintf("goal: with limits declared that do not bind, ≥ %.1f× the rate without, through each driver: %s", limitsGoal, strings.Join(goal, ", ")),
		fmt.Sprintf("%s events per run; %d rounds; the limits: the events' kind and their queue, each ≤ %s live (every event claimed is counted under each); or, with the events spread over %s partitions, a default limit per partition of %s (every event claimed is counted in its partition's slot), against the same events under no limit",
			thousands(float64(jobs)), rounds, thousands(lease.MaxLimit), partitionCounts(), thousands(lease.MaxLimit)),
		settleNote(e),
		fmt.Sprintf("leasework defaults: framework.Config with only Schema and Logger set (Concurrency %d), one worker", framework.DefaultConcurrency),
	)

	use := table{
		title: fmt.Sprintf("A binding limit of %d live attempts across %d workers that want %d: handlers of %v",
			boundMax, boundWorkers, boundWorkers*boundConcurrency, boundHandler),
		header: []string{"system", "configuration"},
	}
	for r := range rounds {
		use.header = append(use.header, fmt.Sprintf("round %d", r+1))
	}
	use.header = append(use.header, "median use", "jobs/s (median)", "most live seen")
	var useGoal []string
	for d, drv := range []string{"pgx", "pq"} {
		cells := []string{"leasework " + drv, boundShape.String()}
		var uses, rs []float64
		most := 0
		for _, b := range bound[d] {
			u := b.meanLive / boundMax
			uses = append(uses, u)
			rs = append(rs, b.res.Rate())
			most = max(most, b.mostLive)
			cells = append(cells, fmt.Sprintf("%.0f%%", 100*u))
		}
		m := median(uses)
		cells = append(cells, fmt.Sprintf("%.0f%%", 100*m), thousands(median(rs)), fmt.Sprint(most))
		use.rows = append(use.rows, cells)
		g := fmt.Sprintf("%s %.0f%%", drv, 100*m)
		if !e.quick {
			g += map[bool]string{true: " (held)", false: " (not held)"}[m >= boundGoal]
		}
		useGoal = append(useGoal, g)
	}
	use.notes = append(use.notes,
		fmt.Sprintf("goal: the mean of the live attempts ≥ %.0f%% of the limit: %s", 100*boundGoal, strings.Join(useGoal, ", ")),
		fmt.Sprintf("use: the live attempts (the attempts counted under the limit whose lease runs, as Store.Limits counts them) sampled every %v while %s events ran, their mean ÷ %d; an attempt holds its place from its claim until its outcome is written",
			boundSample, thousands(float64(boundJobs)), boundMax),
		"most live seen: the largest sample; never above the limit",
	)
	return []table{loose, use}, nil
}

// liveSQL counts the live attempts counted under any limit of s's table,
// as Store.Limits does for each limit, through the index of such
// attempts (migration 18), without the held-back count Store.Limits also
// reads: the bench's one limit, sampled every boundSample.
func liveSQL(s *lease.Store) string {
	return `SELECT count(*) FROM ` + s.QualifiedTable() + ` WHERE status = 'INPROGRESS'
        AND (kind_slot IS NOT NULL OR queue_slot IS NOT NULL) AND lease_until > statement_timestamp()`
}

// boundSample is how often runBound samples the live attempts.
const boundSample = 2 * time.Millisecond

// boundRun is one run under a binding limit.
type boundRun struct {
	res      runResult
	meanLive float64
	mostLive int
}

// runBound runs n events of boundHandler's length through the shape's
// workers, sampling the live attempts of the first limit while they run.
func runBound(ctx context.Context, e *env, drvName string, shape lwShape, n int) (boundRun, error) {
	t, err := newLWTable(ctx, e, drvName, shape, n)
	if err != nil {
		return boundRun{}, err
	}
	defer t.close(e)
	var (
		out     boundRun
		samples []int
		stop    = make(chan struct{})
		done    sync.WaitGroup
		sampErr error
	)
	hooks := runHooks{
		Handler: leasework.HandlerFunc(func(ctx context.Context, _ *leasework.Claim) error {
			time.Sleep(boundHandler)
			return nil
		}),
		Before: func(ctx context.Context) error {
			done.Go(func() {
				tick := time.NewTicker(boundSample)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					var live int
					if err := t.store.DB().QueryRowContext(ctx, liveSQL(t.store)).Scan(&live); err != nil {
						sampErr = err
						return
					}
					samples = append(samples, live)
				}
			})
			return nil
		},
		After: func(context.Context) error {
			close(stop)
			done.Wait()
			return sampErr
		},
	}
	res, err := t.work(ctx, shape, n, hooks)
	t.closePools()
	if err != nil {
		return boundRun{}, err
	}
	out.res = res
	sum := 0
	for _, s := range samples {
		sum += s
		out.mostLive = max(out.mostLive, s)
	}
	if len(samples) > 0 {
		out.meanLive = float64(sum) / float64(len(samples))
	}
	return out, nil
}
