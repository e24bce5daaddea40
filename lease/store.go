package lease

import (
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"

	"github.com/leasework/leasework"
)

// Defaults for [Options].
const (
	DefaultSchema      = "leasework"
	DefaultTable       = "events"
	DefaultMaxAttempts = 25
)

// Options configures a [Store]. The zero value is valid.
type Options struct {
	// Schema holds the table. Zero means "leasework". Lower-case letters,
	// digits and underscores, not starting with a digit or pg_, at most 63
	// bytes. Upper case is refused: PostgreSQL folds unquoted names to lower
	// case, so a schema created as "Jobs" would not be found as Jobs by
	// someone typing it in psql.
	Schema string

	// Table is the events table. Zero means "events". The same rules as
	// Schema, at most 40 bytes (index and function names derive from it).
	Table string

	// MaxAttempts is the attempt budget given to events enqueued without
	// one. Zero means 25. Negative is an error.
	MaxAttempts int

	// EnqueueMiddleware wraps every enqueue of the store (Enqueue,
	// EnqueueWith, EnqueueTx), the first outermost; see
	// [EnqueueMiddleware].
	EnqueueMiddleware []EnqueueMiddleware

	// EnqueueCopyMin is the smallest batch that an enqueue (Enqueue,
	// EnqueueWith, EnqueueTx) copies into the table with COPY, when its
	// transaction can: a [leasework.CopyTx] (driver/pgx's WrapTx of a
	// pgx.Tx), or a *sql.Tx of a driver that is a [leasework.Copier]
	// (driver/pq). Smaller batches, and every batch in a transaction that
	// cannot COPY (pgx through database/sql), go in with one INSERT. Both
	// keep every promise of [Store.Enqueue]; see "Bulk enqueue" in the
	// package doc. Zero means [DefaultEnqueueCopyMin]; negative means
	// never.
	EnqueueCopyMin int
}

// Store runs leasework's statements against one events table. It is safe for
// concurrent use.
type Store struct {
	db         *sql.DB
	drv        leasework.Driver
	schema     string
	table      string
	maxAtt     int
	middleware []EnqueueMiddleware
	copyMin    int // 0: never
	channel    string
	q          queries
	cq         copyStatements
	wq         whyStatements
	fq         fairStatements
	// policies: per queue, whether its last claim that took rows said it
	// is fair or ages its rows (claimFor).
	policies sync.Map
}

// New returns a Store for the table named by opts in the database behind db.
// It does not touch the database; call [Store.Migrate] to create the schema.
func New(db *sql.DB, drv leasework.Driver, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("lease: New: db is nil")
	}
	if drv == nil {
		return nil, errors.New("lease: New: driver is nil")
	}
	s, err := namesOnly(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.MaxAttempts < 0:
		return nil, fmt.Errorf("lease: Options.MaxAttempts is %d; it must be positive, or zero for the default of %d", opts.MaxAttempts, DefaultMaxAttempts)
	case opts.MaxAttempts == 0:
		opts.MaxAttempts = DefaultMaxAttempts
	}
	for i, m := range opts.EnqueueMiddleware {
		if m == nil {
			return nil, fmt.Errorf("lease: Options.EnqueueMiddleware[%d] is nil", i)
		}
	}
	s.db, s.drv, s.maxAtt = db, drv, opts.MaxAttempts
	s.middleware = slices.Clone(opts.EnqueueMiddleware)
	switch {
	case opts.EnqueueCopyMin == 0:
		s.copyMin = DefaultEnqueueCopyMin
	case opts.EnqueueCopyMin > 0:
		s.copyMin = opts.EnqueueCopyMin
	}
	s.q = s.renderQueries()
	s.cq = s.renderCopyStatements()
	s.wq = s.renderWhy()
	s.fq = s.renderFair()
	return s, nil
}

// DB returns the pool the store runs on.
func (s *Store) DB() *sql.DB { return s.db }

// Driver returns the store's driver.
func (s *Store) Driver() leasework.Driver { return s.drv }

// Schema returns the schema name.
func (s *Store) Schema() string { return s.schema }

// Table returns the table name.
func (s *Store) Table() string { return s.table }

// QualifiedTable returns the quoted, schema-qualified table name.
func (s *Store) QualifiedTable() string { return QuoteIdent(s.schema) + "." + QuoteIdent(s.table) }

// Channel returns the LISTEN/NOTIFY channel on which inserts into the table
// are announced. The payload of each notification is an event kind.
func (s *Store) Channel() string { return s.channel }

// SQLSTATE codes of a table or schema that does not exist.
const (
	sqlStateUndefinedTable = "42P01"
	sqlStateInvalidSchema  = "3F000"
)

// wrapErr wraps the error of a statement on the table. When the table or its
// schema does not exist, the message names the table and the fix.
func (s *Store) wrapErr(op string, err error) error {
	return s.wrapErrState(s.drv.SQLState, op, err)
}

// wrapErrState is wrapErr for an error whose SQLSTATE sqlState reads: that
// of a transaction of another driver than the store's.
func (s *Store) wrapErrState(sqlState func(error) string, op string, err error) error {
	switch sqlState(err) {
	case sqlStateUndefinedTable, sqlStateInvalidSchema:
		return fmt.Errorf("lease: %s: table %s does not exist: is the table migrated? run `leasework migrate` or Store.Migrate: %w",
			op, s.QualifiedTable(), err)
	}
	return fmt.Errorf("lease: %s: %w", op, err)
}

var placeholder = regexp.MustCompile(`\{\{(table|tableText|keyLockTable|keysListed|schema|channel|name "([a-z_]+)")\}\}`)

// keysListed names the setting in which a transaction lists the keyed rows
// it inserted into the table, for the commit-time step of order per key
// (migration 14): one per table, and a valid setting name whatever the
// table's name.
func (s *Store) keysListed() string {
	sum := md5.Sum([]byte(s.schema + "." + s.table))
	return "leasework.keys_listed_" + hex.EncodeToString(sum[:])
}

// objectName is the name of the table's object (an index, a function, the
// event id table) whose suffix is suffix, unquoted: what the name
// placeholder of a statement renders, before quoting.
func (s *Store) objectName(suffix string) string { return s.table + "_" + suffix }

// render replaces the placeholders of an SQL template with quoted names.
func (s *Store) render(tmpl string) string {
	return placeholder.ReplaceAllStringFunc(tmpl, func(m string) string {
		sub := placeholder.FindStringSubmatch(m)
		switch {
		case sub[1] == "table":
			return s.QualifiedTable()
		case sub[1] == "tableText": // the qualified name as a string literal
			return quoteLiteral(s.QualifiedTable())
		case sub[1] == "keyLockTable": // the table as the key locks name it: schema.table, unquoted, as a literal
			return quoteLiteral(s.schema + "." + s.table)
		case sub[1] == "keysListed": // the transaction setting that lists the table's keyed rows (migration 14), as a literal
			return quoteLiteral(s.keysListed())
		case sub[1] == "schema":
			return QuoteIdent(s.schema)
		case sub[1] == "channel":
			return quoteLiteral(s.channel)
		default:
			return QuoteIdent(s.objectName(sub[2]))
		}
	})
}
