package lease

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
		"retry":          {s.q.retry, "bigint[], jsonb"},
		"fail":           {s.q.fail, "bigint[], jsonb"},
		"renew":          {s.q.renew, "bigint[], jsonb, bigint"},
		"release":        {s.q.release, "bigint[], jsonb, text"},
	}
}

// Progress returns the guarded single-row progress write.
func Progress(s *Store) Statement {
	return Statement{s.q.progress, "bigint, bigint, bytea"}
}

// DeleteFinished returns the retention statement.
func DeleteFinished(s *Store) Statement {
	return Statement{s.q.deleteFinished, "bigint, bigint"}
}

// ByID is byID, the per-claim parameter of the batched guarded writes.
var ByID = byID
