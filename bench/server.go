package main

// The server section: what one job costs the server (CPU, statement time,
// WAL, commits) and the client, per system, each run once through the
// throughput runners with hooks around the timed part.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() { addSection("server", serverCost) }

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// statsFlush is how long a backend may hold counts it has not reported to
// the statistics system: PostgreSQL flushes them at most once a second.
const statsFlush = 1200 * time.Millisecond

// serverProbe reads the server's counters on a connection of its own. Its
// statements carry the comment "/* bench */", which the statement figures
// leave out.
type serverProbe struct {
	db         *sql.DB
	pid        int    // the postmaster's; 0 when the server was given by DSN
	statements string // why pg_stat_statements cannot be read; "" when it can
}

// serverSnap is the counters at one moment.
type serverSnap struct {
	wal       string        // pg_current_wal_lsn()
	xidNext   int64         // the next transaction id to be assigned
	clientCPU time.Duration // of this process
}

// serverCosts is one run's figures, summed.
type serverCosts struct {
	jobs         int
	elapsed      time.Duration
	serverCPU    time.Duration
	clientCPU    time.Duration
	walBytes     float64
	xids         int64
	commits      int64
	execMS       float64 // pg_stat_statements total_exec_time
	calls        int64
	serverCPUErr error
}

func newServerProbe(ctx context.Context, e *env) (*serverProbe, error) {
	db, err := openDB(ctx, "pgx", e.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one backend, alive throughout: the wait for others to exit leaves it out
	p := &serverProbe{db: db}
	if e.server != nil {
		p.pid = e.server.PID()
	}
	if _, err := db.ExecContext(ctx, "/* bench */ CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		p.statements = fmt.Sprintf("CREATE EXTENSION pg_stat_statements: %v", err)
	} else if _, err := db.ExecContext(ctx, "SELECT /* bench */ pg_stat_statements_reset()"); err != nil {
		p.statements = fmt.Sprintf("pg_stat_statements_reset: %v", err)
	}
	return p, nil
}

func (p *serverProbe) snap(ctx context.Context) (serverSnap, error) {
	var s serverSnap
	err := p.db.QueryRowContext(ctx,
		"SELECT /* bench */ pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&s.wal, &s.xidNext)
	if err != nil {
		return s, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s, err
	}
	s.clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s, nil
}

// commits reads xact_commit of the database, past the backend's cached
// snapshot of the statistics.
func (p *serverProbe) commits(ctx context.Context) (int64, error) {
	if _, err := p.db.ExecContext(ctx, "SELECT /* bench */ pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	var n int64
	err := p.db.QueryRowContext(ctx,
		"SELECT /* bench */ xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	return n, err
}

// othersGone waits, for up to 10s, until no other client backend is
// connected to the database: a backend reports its last counts as it
// exits.
func (p *serverProbe) othersGone(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := p.db.QueryRowContext(ctx, `SELECT /* bench */ count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil || n == 0 || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serverCPU sums user and system CPU of the postmaster, its children that
// have exited (cutime, cstime) and its live children, from /proc.
func serverCPU(postmaster int) (time.Duration, error) {
	fields, err := procStat(postmaster)
	if err != nil {
		return 0, err
	}
	total := ticksOf(fields, 11, 12, 13, 14) // utime stime cutime cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || len(f) < 15 || f[1] != strconv.Itoa(postmaster) {
			continue // gone meanwhile, or not a child
		}
		total += ticksOf(f, 11, 12, 13, 14)
	}
	return time.Duration(total) * time.Second / clockTicks, nil
}

// procStat returns the fields of /proc/<pid>/stat after the command name:
// the state is [0], the parent pid [1], utime [11].
func procStat(pid int) ([]string, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

func ticksOf(fields []string, idx ...int) int64 {
	var sum int64
	for _, i := range idx {
		if i < len(fields) {
			v, _ := strconv.ParseInt(fields[i], 10, 64)
			sum += v
		}
	}
	return sum
}

// measure runs n events through run with hooks that take the counters
// around the timed part.
func (p *serverProbe) measure(ctx context.Context, e *env, run runner, n int) (serverCosts, error) {
	var (
		c              serverCosts
		before         serverSnap
		commitsBefore  int64
		cpuBefore      time.Duration
		cpuBeforeError error
	)
	hooks := runHooks{
		Before: func(ctx context.Context) error {
			// Counts of the enqueue not yet reported would land in the run.
			time.Sleep(statsFlush)
			var err error
			if commitsBefore, err = p.commits(ctx); err != nil {
				return err
			}
			if p.statements == "" {
				if _, err := p.db.ExecContext(ctx, "SELECT /* bench */ pg_stat_statements_reset()"); err != nil {
					return err
				}
			}
			if p.pid != 0 {
				cpuBefore, cpuBeforeError = serverCPU(p.pid)
			}
			before, err = p.snap(ctx)
			return err
		},
		After: func(ctx context.Context) error {
			after, err := p.snap(ctx)
			if err != nil {
				return err
			}
			if p.pid != 0 {
				cpu, err := serverCPU(p.pid)
				c.serverCPU, c.serverCPUErr = cpu-cpuBefore, cmpErr(cpuBeforeError, err)
			}
			c.clientCPU = after.clientCPU - before.clientCPU
			c.xids = after.xidNext - before.xidNext
			if err := p.db.QueryRowContext(ctx, "SELECT /* bench */ pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)", after.wal, before.wal).Scan(&c.walBytes); err != nil {
				return err
			}
			if p.statements == "" {
				err := p.db.QueryRowContext(ctx, `SELECT /* bench */ coalesce(sum(total_exec_time), 0), coalesce(sum(calls), 0)::bigint
					FROM pg_stat_statements
					WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
					  AND query NOT LIKE '%/* bench */%'`).Scan(&c.execMS, &c.calls)
				if err != nil {
					return err
				}
			}
			return nil
		},
		Stopped: func(ctx context.Context) error {
			if err := p.othersGone(ctx); err != nil {
				return err
			}
			commits, err := p.commits(ctx)
			c.commits = commits - commitsBefore
			return err
		},
	}
	res, err := run(ctx, e, n, hooks)
	c.jobs, c.elapsed = res.Jobs, res.Elapsed
	return c, err
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func serverCost(ctx context.Context, e *env) ([]table, error) {
	jobs, _ := sizes(e)
	jobs = max(jobs/2, 1000)
	p, err := newServerProbe(ctx, e)
	if err != nil {
		return nil, err
	}
	defer p.db.Close()

	var notes []string
	best := func(drvName string) lwShape {
		if s, ok := bestShapes[drvName]; ok {
			return s
		}
		notes = append(notes, fmt.Sprintf("leasework %s best: the throughput section did not run, so its first candidate is used", drvName))
		return lwBestCandidates[0]
	}
	bestPGX, bestPQ := best("pgx"), best("pq")
	systems := []struct {
		label, config string
		run           runner
	}{
		{"leasework pgx, best", bestPGX.String(), leaseworkRunner("pgx", bestPGX)},
		{"leasework pq, best", bestPQ.String(), leaseworkRunner("pq", bestPQ)},
		{"leasework pgx, defaults", lwShape{}.String(), leaseworkRunner("pgx", lwShape{})},
		{"River pgx, bench settings", fmt.Sprintf("%s workers, %v / %v", thousands(float64(riverBench.maxWorkers)), riverBench.fetchCooldown, riverBench.fetchPollInterval), riverRunner("pgx", riverBench)},
		{"bare loop, pgx", fmt.Sprintf("Claim of %d + WriteMany, %d loops", bareClaim, bareLoops), runBareLoop},
	}
	t := table{
		title: "Server cost per job",
		header: []string{"system", "configuration", "jobs/s", "server CPU µs/job", "statement time µs/job", "statements/job",
			"WAL bytes/job", "commits /1,000 jobs", "write xacts /1,000 jobs", "client CPU µs/job"},
	}
	for _, s := range systems {
		c, err := p.measure(ctx, e, s.run, jobs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.label, err)
		}
		e.logf("server: %s: %s jobs/s", s.label, thousands(float64(c.jobs)/c.elapsed.Seconds()))
		per := func(x float64) float64 { return x / float64(c.jobs) }
		cpu := "n/a (server given by DSN: no /proc figures)"
		switch {
		case p.pid != 0 && c.serverCPUErr != nil:
			cpu = fmt.Sprintf("n/a (%v)", c.serverCPUErr)
		case p.pid != 0:
			cpu = fmt.Sprintf("%.0f", per(float64(c.serverCPU.Microseconds())))
		}
		execTime, calls := "n/a (see notes)", "n/a (see notes)"
		if p.statements == "" {
			execTime = fmt.Sprintf("%.1f", per(c.execMS*1000))
			calls = fmt.Sprintf("%.3f", per(float64(c.calls)))
		}
		t.rows = append(t.rows, []string{
			s.label, s.config,
			thousands(float64(c.jobs) / c.elapsed.Seconds()),
			cpu, execTime, calls,
			thousands(per(c.walBytes)),
			fmt.Sprintf("%.1f", per(float64(c.commits)*1000)),
			fmt.Sprintf("%.1f", per(float64(c.xids)*1000)),
			fmt.Sprintf("%.0f", per(float64(c.clientCPU.Microseconds()))),
		})
	}
	t.notes = append(notes,
		fmt.Sprintf("%s events per system, each system run once, one after the other; every run has stopped its workers or client and closed its pools before the next starts", thousands(float64(jobs))),
		settleNote(e),
		"measured from the clock's start (after the enqueue, and a 1.2 s pause so that the enqueue's counts are reported) until every event is done; commits until the system has stopped and its connections have closed (a backend reports its last counts as it exits), so they include the stop's",
		"server CPU: user + system time from /proc of the postmaster, its exited children (cutime, cstime) and its live children: backends, autovacuum, checkpointer, WAL writer, in 10 ms ticks",
		"statement time and statements: pg_stat_statements (reset after the enqueue) summed over this database's statements, execution time only, the measuring statements left out",
		"WAL bytes: pg_wal_lsn_diff of pg_current_wal_lsn(); commits: xact_commit of pg_stat_database, read-only ones included; write xacts: transaction ids assigned (pg_snapshot_xmax of pg_current_snapshot())",
		"client CPU: getrusage of this process (user + system), so it includes the Go runtime and the measuring goroutine's 1 ms polls; nothing of an earlier run is left running",
	)
	if p.statements != "" {
		t.notes = append(t.notes, "statement figures n/a: "+p.statements)
	}
	if e.quick {
		t.notes = append(t.notes, "-quick: few events, figures are rough")
	}
	return []table{t}, nil
}
