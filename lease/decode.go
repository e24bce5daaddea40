package lease

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// A row is decoded column by column, so that one value a column's field
// cannot hold fails that column, not the row, and never the rows read with
// it (invariant 14). The schema refuses at insert what a claim cannot read
// (migration 10), but a row written before that, or by a producer's own SQL
// past an older check, may still hold it: metadata that is not an object of
// strings, a timestamp of infinity.

// decoder collects the columns of one row that could not be decoded.
type decoder struct {
	failed []error
}

// column is a destination of rows.Scan for one column: it converts the
// value as database/sql would for dst, and records a value it cannot
// convert, leaving *dst zero, instead of failing the scan.
type column[T any] struct {
	d    *decoder
	name string
	dst  *T
}

// col returns the destination for the column name, decoded into dst.
func col[T any](d *decoder, name string, dst *T) *column[T] {
	return &column[T]{d, name, dst}
}

func (c *column[T]) Scan(src any) error {
	var v sql.Null[T] // converts (and copies) as rows.Scan does; NULL is the zero value
	if err := v.Scan(src); err != nil {
		var zero T
		*c.dst = zero
		c.d.fail(c.name, err)
		return nil
	}
	*c.dst = v.V
	return nil
}

// fail records that the column name could not be decoded.
func (d *decoder) fail(name string, err error) {
	d.failed = append(d.failed, fmt.Errorf("column %q: %w", name, err))
}

// err returns the row's decoding failures, each naming its column, or nil.
func (d *decoder) err() error {
	if len(d.failed) == 0 {
		return nil
	}
	return decodeError(d.failed)
}

// metadata decodes the metadata column's text into *dst.
func (d *decoder) metadata(text string, dst *map[string]string) {
	m, err := parseMetadata(text)
	if err != nil {
		d.fail("metadata", err)
		return
	}
	*dst = m
}

// steps decodes a row's steps column (migration 26, as text; "" when
// NULL) into each step's record, by name.
func (d *decoder) steps(text string, dst *map[string]StepRecord) {
	if text == "" {
		return
	}
	var raw map[string]struct {
		G  int64     `json:"g"`
		At time.Time `json:"at"`
		V  string    `json:"v"`
	}
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		d.fail("steps", err)
		return
	}
	m := make(map[string]StepRecord, len(raw))
	for name, r := range raw {
		v, err := base64.StdEncoding.DecodeString(r.V)
		if err != nil {
			d.fail("steps", fmt.Errorf("step %q: %w", name, err))
			return
		}
		m[name] = StepRecord{Name: name, Generation: r.G, At: r.At, Value: v}
	}
	*dst = m
}

// claimSteps decodes a claim's steps column into its values by name.
func (d *decoder) claimSteps(text string, dst *map[string][]byte) {
	var m map[string]StepRecord
	d.steps(text, &m)
	if m == nil {
		return
	}
	*dst = make(map[string][]byte, len(m))
	for name, r := range m {
		(*dst)[name] = r.Value
	}
}

// decodeError is the columns of a row that could not be decoded, one
// error per column, each naming it.
type decodeError []error

func (e decodeError) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return "cannot decode " + strings.Join(msgs, "; ")
}

func (e decodeError) Unwrap() []error { return e }
