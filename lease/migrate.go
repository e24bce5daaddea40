package lease

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned step of the schema.
type Migration struct {
	Version int
	Name    string
	// WhileWorkersRun reports whether the step may be applied while
	// workers and producers of the previous version run: their writes may
	// wait for its locks, nothing worse. When false, stop them first; the
	// step's SQL says why in its header.
	WhileWorkersRun bool
	sql             string
}

// Each migration starts with directives, one per line; so far only
//
//	-- leasework: workers running    (or stopped: see Migration.WhileWorkersRun)
const directive = "-- leasework: "

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration {
	entries, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	var ms []Migration
	for _, path := range entries {
		base := strings.TrimPrefix(path, "migrations/")
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("lease: badly named migration " + path)
		}
		body, err := migrationFS.ReadFile(path)
		if err != nil {
			panic(err)
		}
		m := Migration{Version: v, Name: name, sql: string(body)}
		workers := ""
		for line := range strings.Lines(m.sql) {
			d, ok := strings.CutPrefix(strings.TrimSpace(line), directive)
			if !ok {
				break
			}
			w, ok := strings.CutPrefix(d, "workers ")
			if !ok {
				panic("lease: migration " + path + ": unknown directive " + d)
			}
			workers = w
		}
		switch workers {
		case "running":
			m.WhileWorkersRun = true
		case "stopped":
		default:
			panic("lease: migration " + path + " does not say whether workers may run")
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

// SQL returns the step's SQL for the table named by opts (Schema and Table;
// zero means the defaults), for teams that run migrations with their own
// tool (goose, atlas, golang-migrate). Run the steps in version order, each
// in a transaction of its own. Each creates the schema
// and the table's migrations table if needed and records itself there, as
// [Store.Migrate] does, so that Migrate and a tool can take turns: neither
// applies a step twice.
func (m Migration) SQL(opts Options) (string, error) {
	s, err := namesOnly(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, q := range migrationsTable {
		b.WriteString(s.render(q))
		b.WriteString(";\n")
	}
	b.WriteString(s.render(m.sql))
	fmt.Fprintf(&b, "\n%s\nVALUES (%d, %s) ON CONFLICT (version) DO NOTHING;\n",
		s.render(`INSERT INTO {{schema}}.{{name "migrations"}} (version, name)`), m.Version, quoteLiteral(m.Name))
	return b.String(), nil
}

// namesOnly checks the names opts gives (defaults for empty ones) and
// returns a store that renders statements for that table and runs none;
// New completes it.
func namesOnly(opts Options) (*Store, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := validateName("Options.Schema", opts.Schema, maxSchemaLen); err != nil {
		return nil, err
	}
	if err := validateName("Options.Table", opts.Table, maxTableLen); err != nil {
		return nil, err
	}
	return &Store{schema: opts.Schema, table: opts.Table, channel: channelName(opts.Schema, opts.Table)}, nil
}

// migrationsTable creates the schema and the table's migrations table.
var migrationsTable = []string{
	`CREATE SCHEMA IF NOT EXISTS {{schema}}`,
	`CREATE TABLE IF NOT EXISTS {{schema}}.{{name "migrations"}} (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT statement_timestamp())`,
}

// Migrate creates the schema, the table and everything it needs, applying
// the migrations not yet recorded in the table's migrations table, all in one
// transaction. Running it again is a no-op, and processes migrating tables
// of one schema at once are serialized by a transaction-scoped advisory lock
// keyed by the schema, so every process may call it at start-up.
//
// It returns the versions it applied.
func (s *Store) Migrate(ctx context.Context) (applied []int, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	// The locks come first: CREATE ... IF NOT EXISTS is not safe against a
	// concurrent CREATE of the same name. CREATE SCHEMA acts on the schema,
	// so migrations of any table of the schema take the schema's lock; the
	// table's lock after it (always in this order) also serializes this
	// version with older ones, which took only the table's.
	for _, key := range []string{
		"leasework:migrate-schema:" + s.schema,
		"leasework:migrate:" + s.schema + "." + s.table,
	} {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key); err != nil {
			return nil, fmt.Errorf("lease: migrate: lock: %w", err)
		}
	}
	for _, q := range migrationsTable {
		if _, err := tx.ExecContext(ctx, s.render(q)); err != nil {
			return nil, fmt.Errorf("lease: migrate: %w", err)
		}
	}
	done := map[int]bool{}
	rows, err := tx.QueryContext(ctx, s.render(`SELECT version FROM {{schema}}.{{name "migrations"}}`))
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("lease: migrate: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: migrate: %w", err)
	}
	rows.Close()
	for _, m := range Migrations() {
		if done[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, s.render(m.sql)); err != nil {
			return nil, fmt.Errorf("lease: migration %d (%s): %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, s.render(`INSERT INTO {{schema}}.{{name "migrations"}} (version, name) VALUES ($1, $2)`), m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("lease: migrate: record %d: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("lease: migrate: commit: %w", err)
	}
	return applied, nil
}

// DropSchema drops the store's schema and everything in it. It exists for
// tests and throwaway databases.
func (s *Store) DropSchema(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.render(`DROP SCHEMA IF EXISTS {{schema}} CASCADE`))
	if err != nil {
		return fmt.Errorf("lease: drop schema: %w", err)
	}
	return nil
}
