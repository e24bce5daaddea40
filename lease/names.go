package lease

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Limits on configurable names. The table name is shorter than PostgreSQL's
// 63-byte identifier limit because index, constraint and function names are
// derived from it with a suffix.
const (
	maxSchemaLen = 63
	maxTableLen  = 40
)

// validateName checks a schema or table name: lower-case ASCII letters,
// digits and underscores, not starting with a digit, not starting with pg_,
// at most maxLen bytes. Names are always quoted as identifiers in SQL; this
// check keeps them to the form that means the same quoted and unquoted, so
// that a mistake (a space, a quote, a dot, an upper-case letter) is reported
// as what it is instead of creating an object other tools cannot find by the
// name typed.
func validateName(field, name string, maxLen int) error {
	if name == "" {
		return fmt.Errorf("lease: %s is empty", field)
	}
	if len(name) > maxLen {
		return fmt.Errorf("lease: %s %q is %d bytes long; at most %d are allowed", field, name, len(name), maxLen)
	}
	upper := false
	for i, r := range name {
		upper = upper || ('A' <= r && r <= 'Z')
		ok := r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || (i > 0 && '0' <= r && r <= '9')
		if !ok {
			return fmt.Errorf("lease: %s %q is invalid: use lower-case letters, digits and underscores, starting with a letter or underscore", field, name)
		}
	}
	if upper {
		// The store quotes names, so it would find the table; a person
		// typing the name unquoted in psql or another tool would not.
		return fmt.Errorf("lease: %s %q has upper case; use lower case: PostgreSQL folds unquoted names to lower case, so %s would be created as %q and not found as %s",
			field, name, name, name, name)
	}
	if strings.HasPrefix(name, "pg_") {
		return fmt.Errorf("lease: %s %q is invalid: the pg_ prefix is reserved by PostgreSQL", field, name)
	}
	return nil
}

// QuoteIdent quotes s as an SQL identifier.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func quoteLiteral(s string) string {
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

// channelName is the LISTEN/NOTIFY channel of one table: readable when it
// fits in an identifier, hashed when it does not.
func channelName(schema, table string) string {
	name := "leasework:" + schema + "." + table
	if len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(schema + "." + table))
	return fmt.Sprintf("leasework:%016x", h.Sum64())
}
