package lease

import "context"

// Statement is one of the store's statements with the SQL types of its
// parameters, for tests that look at plans (PREPARE name(types) AS query).
type Statement struct {
	Query string
	Types string
}

// GuardedWrites returns the store's batched guarded writes by name.
func GuardedWrites(s *Store) map[string]Statement {
	return map[string]Statement{
		"complete":       {s.q.complete, "bigint[], jsonb"},
		"completeDelete": {s.q.completeDelete, "bigint[], jsonb"},
		// in a caller's transaction: the keys are left to the triggers
		"completeTx":       {s.q.completeTx, "bigint[], jsonb"},
		"completeDeleteTx": {s.q.completeDeleteTx, "bigint[], jsonb"},
		// taking turns: $3 queue, $4 limit, $5 kinds, $6 lease, $7 worker
		"completeTaking":       {s.q.completeTaking, "bigint[], jsonb, text, integer, text[], bigint, text"},
		"completeDeleteTaking": {s.q.completeDeleteTaking, "bigint[], jsonb, text, integer, text[], bigint, text"},
		"retry":                {s.q.retry, "bigint[], jsonb"},
		"fail":                 {s.q.fail, "bigint[], jsonb"},
		"renew":                {s.q.renew, "bigint[], jsonb, bigint"},
		"release":              {s.q.release, "bigint[], jsonb, text"},
	}
}

// ClaimStatement returns the claim: $1 limit, $2 kinds, $3 lease in
// microseconds, $4 worker, $5 queue, $6 the levels' floors, $7 the expired
// leases' floor (microseconds from the epoch).
func ClaimStatement(s *Store) Statement {
	return Statement{s.q.claim, "int, text[], bigint, text, text, bigint[], bigint"}
}

// ProgressStatement returns the guarded single-row progress write.
func ProgressStatement(s *Store) Statement {
	return Statement{s.q.progress, "bigint, bigint, bytea"}
}

// RequeueRefs returns the requeue of rows seen FAILED at a generation: $1
// ids, $2 generations by id, $3 channel, $4 extra attempts.
func RequeueRefs(s *Store) Statement {
	return Statement{s.q.requeueRefs, "bigint[], jsonb, text, int"}
}

// DeleteFinished returns the retention statement.
func DeleteFinished(s *Store) Statement {
	return Statement{s.q.deleteFinished, "bigint, bigint, boolean"}
}

// ByID is byID, the per-claim parameter of the batched guarded writes.
var ByID = byID

// MigrateTo applies the migrations up to version, as an older release of
// the package did, recording them like Migrate.
func MigrateTo(ctx context.Context, s *Store, version int) error {
	for _, q := range []string{
		`CREATE SCHEMA IF NOT EXISTS {{schema}}`,
		`CREATE TABLE IF NOT EXISTS {{schema}}.{{name "migrations"}} (
			version integer PRIMARY KEY,
			name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT statement_timestamp())`,
	} {
		if _, err := s.db.ExecContext(ctx, s.render(q)); err != nil {
			return err
		}
	}
	for _, m := range Migrations() {
		if m.Version > version {
			break
		}
		qs := []string{s.render(m.sql)}
		if m.NoTransaction {
			qs = statements(qs[0])
		}
		for _, q := range qs {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		if _, err := s.db.ExecContext(ctx, s.render(`INSERT INTO {{schema}}.{{name "migrations"}} (version, name) VALUES ($1, $2)`), m.Version, m.Name); err != nil {
			return err
		}
	}
	return nil
}

// NewMigration makes a migration from its SQL, directives included, as
// Migrations reads the embedded files.
var NewMigration = parseMigration

// MigrateWith is Migrate with the steps ms instead of the embedded ones.
func MigrateWith(ctx context.Context, s *Store, ms []Migration) ([]int, error) {
	return s.migrate(ctx, ms)
}

// Statements splits the SQL of a step run outside a transaction.
var Statements = statements

// RenderedSQL is m's SQL for s's table, as Migrate runs it.
func RenderedSQL(s *Store, m Migration) string { return s.render(m.sql) }

// RowStatements returns, by name, the store's statements that name rows
// other than the claim and the guarded writes: the operator's repairs,
// retention, and the reads by id, event id or key.
func RowStatements(s *Store) map[string]Statement {
	return map[string]Statement{
		"requeue":        {s.q.requeue, "text[], int, text, boolean"},
		"requeueByID":    {s.q.requeueByID, "bigint[], int, text"},
		"discard":        {s.q.discard, "bigint, bigint"},
		"cancel":         {s.q.cancel, "bigint, text"},
		"deleteFinished": {s.q.deleteFinished, "bigint, bigint, boolean"},
		"get":            {s.q.get, "bigint"},
		"getByEvent":     {s.q.getByEvent, "text"},
		"rejected":       {s.q.rejected, "bigint[]"},
		"existing":       {s.q.existing, "text[]"},
		"copied":         {s.cq.copied, "bigint[]"},
		"keyHead":        {s.q.keyHead, "text"},
		"heldKeys":       {s.q.heldKeys, "text, int"},
		"nextWake":       {s.q.nextWake, "text, bigint"},
	}
}

// KeysListed is the setting in which a transaction lists the keyed rows it
// inserted into s's table (migration 14).
func KeysListed(s *Store) string { return s.keysListed() }

// WhyStatement returns the read of Store.WhyNotRunning: $1 the row id.
func WhyStatement(s *Store) Statement { return Statement{s.wq.why, "bigint"} }

// LimitsSQL returns the read of Store.Limits; it has no parameters.
func LimitsSQL(s *Store) string { return s.q.limits }

// ClaimFairStatement returns the claim of a fair or aging queue, with
// the parameters of ClaimStatement.
func ClaimFairStatement(s *Store) Statement {
	return Statement{s.q.claimFair, "int, text[], bigint, text, text, bigint[], bigint"}
}
