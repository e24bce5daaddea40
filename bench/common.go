package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"
)

// describe says what the run measures on: the machine, Go, and the server
// with the settings that decide its speed.
func describe(ctx context.Context, e *env) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# leasework benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- machine: %d CPUs (%s/%s), %s memory; %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, memTotal(), runtime.Version())
	db, err := sql.Open("pgx", e.dsn)
	if err != nil {
		fmt.Fprintf(&b, "- server: %v\n", err)
		return b.String()
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
		fmt.Fprintf(&b, "- server: %v\n", err)
		return b.String()
	}
	where := "given by DSN"
	if e.server != nil {
		where = "throwaway cluster on this machine"
	}
	fmt.Fprintf(&b, "- PostgreSQL %s (%s):", version, where)
	for _, name := range []string{"fsync", "synchronous_commit", "shared_buffers", "max_connections", "plan_cache_mode"} {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			fmt.Fprintf(&b, " %s=%s", name, v)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// memTotal reads the machine's memory from /proc/meminfo.
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

// openDB opens a pool through a database/sql driver: "pgx" or "postgres"
// (lib/pq).
func openDB(ctx context.Context, driverName, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// freshSchema returns the name of a schema no run used before, for one
// system's tables in one run: runs never see each other's rows.
func freshSchema(prefix string) string {
	return prefix + "_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// median returns the median of xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// thousands formats n with thousands separators: 23,500.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
