// Package errprefix keeps a package's prefix from repeating in a message
// that wraps an error of the same prefix: "lease: get row 5: no such event",
// not "lease: get row 5: lease: no such event".
package errprefix

import "strings"

// Trim returns err with prefix left out of the start of its message, for
// wrapping with %w in a message that already starts with prefix. errors.Is
// and errors.As see err through it. A nil err stays nil.
func Trim(prefix string, err error) error {
	if err == nil {
		return nil
	}
	return trimmed{prefix: prefix, err: err}
}

type trimmed struct {
	prefix string
	err    error
}

func (t trimmed) Error() string { return strings.TrimPrefix(t.err.Error(), t.prefix) }
func (t trimmed) Unwrap() error { return t.err }
