package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NameCollision is one object of the schema that has a name the table
// derives for one of its own, and is not the table's.
type NameCollision struct {
	// Name is the object's name: the table's name, or "<table>_<suffix>".
	Name string
	// Use is what the table derives the name for, such as "index of
	// READY rows per queue".
	Use string
	// Found is what has the name, such as "an index on table s.a_queue".
	Found string
}

// NameCollisionError is returned by [Store.Migrate] when an object of the
// schema has a name that the table derives for one of its own (its
// migrations, event ids and paused queues tables, its indexes, its
// sequence, its functions: "<table>_<suffix>") and is not the table's: a
// table "jobs" beside another table "jobs_queues", or a table "a" whose
// index "a_queue_ready_idx" is the name of an index of table "a_queue".
// Migrate then applies no step, rather than take the other object for the
// table's own. Use another table name or another schema, or rename or drop
// the other object.
//
// An index is the table's own when it is on the table; a side table when
// it has the columns the migrations give it; the sequence when no other
// table owns it; a function when no other table's trigger runs it, and
// either the migration that creates it is applied or the table's own
// triggers use it (a step run again). Triggers and CHECK constraints are
// named within the table, so no other table's can meet them. The SQL of
// [Migration.SQL], for tools of your own, makes no such check.
type NameCollisionError struct {
	Schema, Table string
	Collisions    []NameCollision
	from          int // the first step not applied; 0 if not known
}

func (e *NameCollisionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lease: migrate %s.%s: refused: ", e.Schema, e.Table)
	if len(e.Collisions) == 1 {
		b.WriteString("a name the table derives for an object of its own is taken by an object that is not the table's:")
	} else {
		b.WriteString("names the table derives for objects of its own are taken by objects that are not the table's:")
	}
	for _, c := range e.Collisions {
		fmt.Fprintf(&b, "\n\t%q, its %s, is %s", c.Name, c.Use, c.Found)
	}
	if e.from > 0 {
		fmt.Fprintf(&b, "\nMigration %d and later were not applied.", e.from)
	} else {
		b.WriteString("\nNo migration was applied.")
	}
	fmt.Fprintf(&b, " Give this table another table name (Options.Table) or another schema (Options.Schema), or rename or drop the objects above: objects named %s_<suffix> in schema %s must be the table's own.",
		e.Table, e.Schema)
	return b.String()
}

// A table's migrations name objects after the table: "<table>_<suffix>".
// Indexes, tables, sequences and views share one namespace per schema, and
// so do functions of one signature; a table "a" and a table "a_queue" (or
// any object someone else made) can meet there, and CREATE ... IF NOT
// EXISTS would take the other object for the table's own, CREATE OR
// REPLACE FUNCTION would rewrite it, and DROP ... IF EXISTS would drop it.
// Before applying a step, Migrate checks that every object of a name the
// pending steps use, when it exists, is the table's own. Trigger and
// CHECK constraint names live in the table's own namespace: no other
// table's can meet them.

// objectKind is what a derived name names.
type objectKind int

const (
	inTable     objectKind = iota // a trigger or CHECK constraint: named within the table
	ownIndex                      // an index, which must be on the table
	ownTable                      // a side table, which must have its columns
	ownSequence                   // a sequence, which no other table may own
	ownFunction                   // a function of the schema, of one signature
)

// sideColumn is a column of a side table, with its type as format_type writes it.
type sideColumn struct{ name, typ string }

// derivedObject is one object the migrations name "<table>_<suffix>".
type derivedObject struct {
	kind objectKind
	use  string // what the table uses it for, in an error
	// columns are the columns an ownTable has at least; the first keyLen
	// (at least one) are its primary key.
	columns []sideColumn
	keyLen  int
	// args are an ownFunction's argument types, as oidvectortypes writes
	// them.
	args string
}

// derivedObjects are the objects of every suffix of the migrations' (and
// the statements') {{name "…"}}; a test keeps it complete.
var derivedObjects = map[string]derivedObject{
	"migrations": {kind: ownTable, use: "table of applied migrations",
		columns: []sideColumn{{"version", "integer"}, {"name", "text"}, {"applied_at", "timestamp with time zone"}}},
	"event_ids": {kind: ownTable, use: "table of event ids",
		columns: []sideColumn{{"event_id", "text"}, {"id", "bigint"}}},
	"queues": {kind: ownTable, use: "table of paused queues",
		columns: []sideColumn{{"queue", "text"}, {"paused_at", "timestamp with time zone"}}},
	"key_seq": {kind: ownSequence, use: "sequence of commit order per key"},
	"limits": {kind: ownTable, use: "table of concurrency limits", keyLen: 2,
		columns: []sideColumn{{"scope", "text"}, {"name", "text"}, {"max_live", "integer"}}},
	"limit_slots": {kind: ownTable, use: "table of concurrency limits' slots",
		columns: []sideColumn{{"key", "bigint"}, {"limit_id", "integer"}, {"slot", "integer"}, {"cap", "integer"}, {"used", "integer"}}},
	"limit_releases": {kind: ownTable, use: "table of places given back under concurrency limits", keyLen: 2,
		columns: []sideColumn{{"key", "bigint"}, {"id", "bigint"}, {"n", "integer"}}},
	"limit_changes": {kind: ownTable, use: "table of the changes of concurrency limits",
		columns: []sideColumn{{"id", "bigint"}, {"scope", "text"}, {"name", "text"}}},
	"rate_limits": {kind: ownTable, use: "table of rate limits", keyLen: 2,
		columns: []sideColumn{{"scope", "text"}, {"name", "text"}, {"max_starts", "integer"}, {"period_us", "bigint"}}},
	"rate_shares": {kind: ownTable, use: "table of rate limits' shares",
		columns: []sideColumn{{"key", "bigint"}, {"limit_id", "integer"}, {"share", "integer"}, {"cap", "integer"}}},
	"partition_limits": {kind: ownTable, use: "table of concurrency limits per partition",
		columns: []sideColumn{{"partition", "text"}, {"max_live", "integer"}}},
	"partition_slots": {kind: ownTable, use: "table of the partitions' slots under concurrency limits",
		columns: []sideColumn{{"partition", "text"}, {"id", "bigint"}, {"used", "integer"}}},
	"partition_releases": {kind: ownTable, use: "table of places given back under partition limits", keyLen: 2,
		columns: []sideColumn{{"slot", "bigint"}, {"id", "bigint"}, {"n", "integer"}}},
	"partition_rates": {kind: ownTable, use: "table of rate limits per partition",
		columns: []sideColumn{{"partition", "text"}, {"max_starts", "integer"}, {"period_us", "bigint"}}},
	"partition_timers": {kind: ownTable, use: "table of when partitions' rate limits have room again",
		columns: []sideColumn{{"slot", "bigint"}, {"at", "timestamp with time zone"}}},
	"fair_weights": {kind: ownTable, use: "table of fair scheduling's weights", keyLen: 2,
		columns: []sideColumn{{"queue", "text"}, {"partition", "text"}, {"weight", "integer"}}},
	"fair_keys": {kind: ownTable, use: "table of the partitions fair scheduling serves", keyLen: 2,
		columns: []sideColumn{{"queue", "text"}, {"partition", "text"}, {"pass", "double precision"}}},
	"fair_debts": {kind: ownTable, use: "table of what claims owe fair scheduling's passes",
		columns: []sideColumn{{"id", "bigint"}, {"queue", "text"}, {"partition", "text"}, {"pass", "double precision"}}},
	"fair_arrivals": {kind: ownTable, use: "table of partitions coming to fair scheduling",
		columns: []sideColumn{{"id", "bigint"}, {"queue", "text"}, {"partition", "text"}, {"due_at", "timestamp with time zone"}}},
	"queue_aging": {kind: ownTable, use: "table of priority aging per queue",
		columns: []sideColumn{{"queue", "text"}, {"after_us", "bigint"}}},

	"event_id_key":          {kind: ownIndex, use: "unique index of event ids (until migration 5)"},
	"ready_idx":             {kind: ownIndex, use: "index of READY rows (until migration 6)"},
	"lease_idx":             {kind: ownIndex, use: "index of leases (until migration 6)"},
	"finished_idx":          {kind: ownIndex, use: "index of finished rows (until migration 3)"},
	"done_idx":              {kind: ownIndex, use: "index of DONE rows by finish time"},
	"waiting_idx":           {kind: ownIndex, use: "index of WAITING rows per key"},
	"live_key_idx":          {kind: ownIndex, use: "index of keys with a live row"},
	"queue_ready_idx":       {kind: ownIndex, use: "index of READY rows per queue"},
	"queue_lease_idx":       {kind: ownIndex, use: "index of leases per queue"},
	"failed_idx":            {kind: ownIndex, use: "index of FAILED rows by finish time"},
	"exhausted_idx":         {kind: ownIndex, use: "index of leases on their last attempt"},
	"stopping_idx":          {kind: ownIndex, use: "index of running attempts whose event was cancelled"},
	"limit_holders_idx":     {kind: ownIndex, use: "index of attempts counted under a concurrency limit"},
	"set_aside_idx":         {kind: ownIndex, use: "index of rows a full partition set aside"},
	"partition_holders_idx": {kind: ownIndex, use: "index of attempts counted in a partition's slot"},
	"discarded_idx":         {kind: ownIndex, use: "index of DISCARDED rows by finish time"},
	"fair_ready_idx":        {kind: ownIndex, use: "index of READY rows per partition of a queue"},

	"notify":               {kind: ownFunction, use: "trigger function that wakes workers"},
	"lock_key":             {kind: ownFunction, use: "function that takes a key's lock", args: "text, text, boolean"},
	"settle_key":           {kind: ownFunction, use: "function that makes a key's next event READY", args: "text"},
	"settle_keys":          {kind: ownFunction, use: "function that makes the next events of many keys READY", args: "text[]"},
	"promote_keys":         {kind: ownFunction, use: "function that makes the next events of many locked keys READY", args: "text[]"},
	"order_keys":           {kind: ownFunction, use: "function that puts many events in line behind their keys", args: "bigint[]"},
	"lock_keys":            {kind: ownFunction, use: "function that takes many keys' locks", args: "text[]"},
	"take_turns":           {kind: ownFunction, use: "function that claims the next events of many keys for a worker", args: "text[], text, integer, text[], bigint, text"},
	"list_keyed":           {kind: ownFunction, use: "trigger function that lists an insert's keyed rows"},
	"order_key":            {kind: ownFunction, use: "trigger function that puts a key's events in line"},
	"release_key":          {kind: ownFunction, use: "trigger function that releases a key"},
	"forget_event_ids":     {kind: ownFunction, use: "trigger function that frees the event ids of deleted rows"},
	"forget_all_event_ids": {kind: ownFunction, use: "trigger function that frees every event id at TRUNCATE"},
	"release_unique":       {kind: ownFunction, use: "trigger function that frees a unique event's arguments as it finishes"},
	"refuse_unreadable":    {kind: ownFunction, use: "trigger function that refuses what a claim cannot decode"},
	"hold_running_key":     {kind: ownFunction, use: "trigger function that refuses deleting a running keyed row"},
	"release_slots":        {kind: ownFunction, use: "trigger function that gives back an attempt's concurrency slots"},
	"wake_partitions":      {kind: ownFunction, use: "function that brings back rows set aside by partition limits", args: "text[]"},
	"fair_arrive":          {kind: ownFunction, use: "trigger function that brought an insert's partitions to fair scheduling (until migration 25)"},
	"fair_again":           {kind: ownFunction, use: "trigger function that brings a row's partition back to fair scheduling"},
	"fair_arrive_many":     {kind: ownFunction, use: "function that brings an insert's partitions to fair scheduling", args: "bigint[], text[], text[], timestamp with time zone[]"},

	"status_check":       {kind: inTable},
	"lease_check":        {kind: inTable},
	"priority_check":     {kind: inTable},
	"queue_check":        {kind: inTable},
	"metadata_check":     {kind: inTable},
	"release_key_delete": {kind: inTable},
	"due_check":          {kind: inTable},

	"release_slots_delete": {kind: inTable},
}

// namesOf returns the suffixes of sql's {{name "…"}}, in order, once
// each.
func namesOf(sql string) []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(sql, -1) {
		if m[2] != "" && !slices.Contains(out, m[2]) {
			out = append(out, m[2])
		}
	}
	return out
}

// relationsSQL reads the relations of schema $1 named in the jsonb array
// $3, with what decides whether each is table $2's own: its kind, the
// table of an index, the table that owns a sequence, the columns and
// primary key of a table.
const relationsSQL = `
SELECT c.relname, c.relkind::text,
    COALESCE(it.nspname, ''), COALESCE(ic.relname, ''), COALESCE(i.indrelid = t.oid, false),
    COALESCE((SELECT jsonb_build_array(on_.nspname, o.relname)
              FROM pg_depend d
              JOIN pg_class o ON o.oid = d.refobjid
              JOIN pg_namespace on_ ON on_.oid = o.relnamespace
              WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
                AND d.refobjid <> c.oid AND d.refobjid IS DISTINCT FROM t.oid
              ORDER BY o.relname LIMIT 1), '[]'::jsonb)::text,
    COALESCE((SELECT jsonb_object_agg(a.attname, format_type(a.atttypid, a.atttypmod))
              FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}'::jsonb)::text,
    COALESCE((SELECT jsonb_agg(a.attname ORDER BY k.ord)
              FROM pg_index p
              CROSS JOIN LATERAL unnest(p.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = p.indrelid AND a.attnum = k.attnum
              WHERE p.indrelid = c.oid AND p.indisprimary), '[]'::jsonb)::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class t ON t.relnamespace = n.oid AND t.relname = $2 AND t.relkind IN ('r', 'p')
LEFT JOIN pg_index i ON i.indexrelid = c.oid
LEFT JOIN pg_class ic ON ic.oid = i.indrelid
LEFT JOIN pg_namespace it ON it.oid = ic.relnamespace
WHERE n.nspname = $1 AND c.relname IN (SELECT jsonb_array_elements_text($3::jsonb))`

// functionsSQL reads the functions of schema $1 named in the jsonb array
// $3: their argument types; the tables other than $2 whose triggers run
// them; whether a trigger of $2 runs them, or a function that one runs
// names them (as the migrations write names: quoted and qualified).
const functionsSQL = `
SELECT p.proname, oidvectortypes(p.proargtypes), p.prosrc,
    COALESCE((SELECT jsonb_agg(DISTINCT jsonb_build_array(gn.nspname, gc.relname))
              FROM pg_trigger g
              JOIN pg_class gc ON gc.oid = g.tgrelid
              JOIN pg_namespace gn ON gn.oid = gc.relnamespace
              WHERE g.tgfoid = p.oid AND g.tgrelid IS DISTINCT FROM t.oid), '[]'::jsonb)::text,
    EXISTS (SELECT 1 FROM pg_trigger g
            JOIN pg_proc gp ON gp.oid = g.tgfoid
            WHERE g.tgrelid = t.oid
              AND (gp.oid = p.oid OR position('"' || replace(n.nspname, '"', '""') || '"."' || replace(p.proname, '"', '""') || '"' IN gp.prosrc) > 0))
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_class t ON t.relnamespace = n.oid AND t.relname = $2 AND t.relkind IN ('r', 'p')
WHERE n.nspname = $1 AND p.proname IN (SELECT jsonb_array_elements_text($3::jsonb))`

// relation is a row of relationsSQL.
type relation struct {
	kind       string // pg_class.relkind
	indexOn    string // an index's table, quoted and qualified
	onTable    bool   // an index on the table being migrated
	owner      string // the other table that owns a sequence, quoted and qualified
	columns    map[string]string
	primaryKey []string
}

// function is a row of functionsSQL.
type function struct {
	args     string
	body     string   // its source, as the server keeps it
	triggers []string // the other tables whose triggers run it, quoted and qualified
	ofTable  bool     // a trigger of the table runs it, or a function one runs names it
}

// checkNames returns a *NameCollisionError if an object of a name that the
// steps of ms not yet applied use (or the table's own name, or its
// migrations table's) exists and is not the table's. q must hold the
// migration's locks.
func (s *Store) checkNames(ctx context.Context, q querier, ms []Migration) error {
	refs := map[string]int{} // suffix -> the version of the first step naming it
	for _, m := range ms {
		for _, n := range namesOf(m.sql) {
			if _, ok := refs[n]; !ok {
				refs[n] = m.Version
			}
		}
	}
	relNames, funcNames := []string{s.table, s.table + "_migrations"}, []string{}
	for suffix := range refs {
		switch derivedObjects[suffix].kind {
		case ownIndex, ownTable, ownSequence:
			relNames = append(relNames, s.table+"_"+suffix)
		case ownFunction:
			funcNames = append(funcNames, s.table+"_"+suffix)
		}
	}
	rels, err := s.readRelations(ctx, q, relNames)
	if err != nil {
		return err
	}
	funcs, err := s.readFunctions(ctx, q, funcNames)
	if err != nil {
		return err
	}
	coll := &NameCollisionError{Schema: s.schema, Table: s.table}

	// The migrations table first: it says which steps are applied.
	applied := map[int]bool{}
	if r, ok := rels[s.table+"_migrations"]; ok {
		if found := s.notOwn(derivedObjects["migrations"], r); found != "" {
			coll.Collisions = append(coll.Collisions, NameCollision{Name: s.table + "_migrations", Use: derivedObjects["migrations"].use, Found: found})
			return coll
		}
		if applied, err = s.appliedVersions(ctx, q); err != nil {
			return err
		}
	}
	if r, ok := rels[s.table]; ok && len(applied) == 0 {
		coll.Collisions = append(coll.Collisions, NameCollision{Name: s.table, Use: "events table",
			Found: kindText(r) + " that no migration of " + QuoteIdent(s.table+"_migrations") + " records"})
	}
	// made(body) reports whether a step creates a function of exactly
	// that body, rendered for this table: a run of one that failed
	// part-way (outside a transaction), or one whose record was lost, left
	// what it made (a later step may have replaced the function of the
	// step that first created it, migration 14 settle_keys, say).
	rendered := make([]string, len(ms))
	for i, m := range ms {
		rendered[i] = s.render(m.sql)
	}
	made := func(body string) bool {
		return strings.TrimSpace(body) != "" && slices.ContainsFunc(rendered, func(r string) bool { return strings.Contains(r, "$$"+body+"$$") })
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if coll.from == 0 {
			coll.from = m.Version
		}
		for _, suffix := range namesOf(m.sql) {
			o, ok := derivedObjects[suffix]
			if !ok || seen[suffix] {
				continue
			}
			seen[suffix] = true
			name := s.table + "_" + suffix
			var found string
			switch o.kind {
			case ownIndex, ownTable, ownSequence:
				if r, ok := rels[name]; ok {
					found = s.notOwn(o, r)
				}
			case ownFunction:
				for _, f := range funcs[name] {
					switch {
					case f.args != o.args: // another signature: no clash
					case len(f.triggers) > 0:
						found = "a function that a trigger on table " + strings.Join(f.triggers, ", ") + " runs"
					case !applied[refs[suffix]] && !f.ofTable && !made(f.body):
						// Not made by an applied step, not one a rerun
						// of the step (its triggers there) finds, and not
						// the step's own, body for body: left by a run
						// outside a transaction that failed part-way,
						// ahead of the trigger that runs it, or by one
						// whose record was lost.
						found = fmt.Sprintf("a function this table's migrations did not create (migration %d, which creates it, is not applied)", refs[suffix])
					}
				}
			}
			if found != "" {
				coll.Collisions = append(coll.Collisions, NameCollision{Name: name, Use: o.use, Found: found})
			}
		}
	}
	if len(coll.Collisions) > 0 {
		return coll
	}
	return nil
}

// notOwn says what r is if it is not the table's own object o; "" if it is.
func (s *Store) notOwn(o derivedObject, r relation) string {
	switch o.kind {
	case ownIndex:
		if (r.kind == "i" || r.kind == "I") && r.onTable {
			return ""
		}
	case ownSequence:
		if r.kind == "S" && r.owner == "" {
			return ""
		}
		if r.kind == "S" {
			return "a sequence of table " + r.owner + " (OWNED BY it, or its identity or serial column)"
		}
	case ownTable:
		if r.kind != "r" && r.kind != "p" {
			break
		}
		keyLen := max(o.keyLen, 1)
		var key []string
		for _, c := range o.columns[:keyLen] {
			key = append(key, c.name)
		}
		ok := slices.Equal(r.primaryKey, key)
		var want []string
		for _, c := range o.columns {
			ok = ok && r.columns[c.name] == c.typ
			want = append(want, c.name+" "+c.typ)
		}
		if ok {
			return ""
		}
		return fmt.Sprintf("a table without the columns %s (primary key %s)", strings.Join(want, ", "), strings.Join(key, ", "))
	}
	return kindText(r)
}

// kindText names what r is: "a view", "an index on table "s"."t"".
func kindText(r relation) string {
	switch r.kind {
	case "r":
		return "a table"
	case "p":
		return "a partitioned table"
	case "i", "I":
		return "an index on table " + r.indexOn
	case "S":
		return "a sequence"
	case "v":
		return "a view"
	case "m":
		return "a materialized view"
	case "f":
		return "a foreign table"
	case "c":
		return "a composite type"
	}
	return "a relation of kind " + strconv.Quote(r.kind)
}

// qualified quotes the pair [schema, name] of a jsonb array.
func qualified(pair []string) string {
	if len(pair) != 2 {
		return ""
	}
	return QuoteIdent(pair[0]) + "." + QuoteIdent(pair[1])
}

func (s *Store) readRelations(ctx context.Context, q querier, names []string) (map[string]relation, error) {
	list, _ := json.Marshal(names)
	rows, err := q.QueryContext(ctx, relationsSQL, s.schema, s.table, string(list))
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: check names: %w", err)
	}
	defer rows.Close()
	out := map[string]relation{}
	for rows.Next() {
		var name, idxSchema, idxTable, owner, columns, pk string
		var r relation
		if err := rows.Scan(&name, &r.kind, &idxSchema, &idxTable, &r.onTable, &owner, &columns, &pk); err != nil {
			return nil, fmt.Errorf("lease: migrate: check names: %w", err)
		}
		if idxTable != "" {
			r.indexOn = QuoteIdent(idxSchema) + "." + QuoteIdent(idxTable)
		}
		var ownerPair []string
		if err := errors.Join(json.Unmarshal([]byte(owner), &ownerPair), json.Unmarshal([]byte(columns), &r.columns),
			json.Unmarshal([]byte(pk), &r.primaryKey)); err != nil {
			return nil, fmt.Errorf("lease: migrate: check names: %w", err)
		}
		r.owner = qualified(ownerPair)
		out[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: migrate: check names: %w", err)
	}
	return out, nil
}

func (s *Store) readFunctions(ctx context.Context, q querier, names []string) (map[string][]function, error) {
	list, _ := json.Marshal(names)
	rows, err := q.QueryContext(ctx, functionsSQL, s.schema, s.table, string(list))
	if err != nil {
		return nil, fmt.Errorf("lease: migrate: check names: %w", err)
	}
	defer rows.Close()
	out := map[string][]function{}
	for rows.Next() {
		var name, triggers string
		var f function
		if err := rows.Scan(&name, &f.args, &f.body, &triggers, &f.ofTable); err != nil {
			return nil, fmt.Errorf("lease: migrate: check names: %w", err)
		}
		var pairs [][]string
		if err := json.Unmarshal([]byte(triggers), &pairs); err != nil {
			return nil, fmt.Errorf("lease: migrate: check names: %w", err)
		}
		for _, p := range pairs {
			f.triggers = append(f.triggers, qualified(p))
		}
		out[name] = append(out[name], f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: migrate: check names: %w", err)
	}
	return out, nil
}
