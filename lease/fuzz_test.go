package lease

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The functions that take text from outside the program (configuration,
// events, handlers' errors) are fuzzed. Their seed corpora live in
// testdata/fuzz/<FuzzName>; plain "go test" runs the seeds, and
// "go test -fuzz=FuzzCleanText ./lease/" looks for more.

// FuzzValidateName: a name is accepted exactly when it means the same quoted
// and unquoted: 1 to maxLen bytes of lower-case ASCII letters, digits and
// underscores, not starting with a digit or pg_. An accepted name needs no
// escaping when quoted.
func FuzzValidateName(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		for _, maxLen := range []int{maxTableLen, maxSchemaLen} {
			err := validateName("Options.Table", name, maxLen)
			want := name != "" && len(name) <= maxLen && !strings.HasPrefix(name, "pg_") &&
				!('0' <= name[0] && name[0] <= '9') &&
				strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
			if (err == nil) != want {
				t.Fatalf("validateName(%q, %d) = %v; want accepted %v", name, maxLen, err, want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "lease: Options.Table") {
				t.Fatalf("validateName(%q) = %q; want the field named first", name, err)
			}
			if err == nil && (QuoteIdent(name) != `"`+name+`"` || strings.ToLower(name) != name) {
				t.Fatalf("accepted name %q quotes as %s", name, QuoteIdent(name))
			}
			// A name wrong only by its upper case says so, and what to do.
			if lower := asciiLower(name); lower != name && validateName("Options.Table", lower, maxLen) == nil &&
				(err == nil || !strings.Contains(err.Error(), "has upper case; use lower case: PostgreSQL folds unquoted names to lower case")) {
				t.Fatalf("validateName(%q) = %v; want it to say to use lower case", name, err)
			}
		}
	})
}

// FuzzValidateKind: a kind is accepted exactly when PostgreSQL text can hold
// it and it fits: non-empty, valid UTF-8, no NUL byte, at most MaxKindBytes.
func FuzzValidateKind(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind string) {
		err := ValidateKind(kind)
		want := kind != "" && storable(kind) && len(kind) <= MaxKindBytes
		if (err == nil) != want {
			t.Fatalf("ValidateKind(%q) = %v; want accepted %v", kind, err, want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "lease: kind") {
			t.Fatalf("ValidateKind(%q) = %q; want it to name the kind", kind, err)
		}
	})
}

// FuzzValidateText: event ids and keys are accepted exactly when PostgreSQL
// text can hold them and they fit their limit.
func FuzzValidateText(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			field string
			max   int
		}{{"EventID", MaxEventIDBytes}, {"Key", MaxKeyBytes}, {"kind", MaxKindBytes}} {
			err := validateText(c.field, s, c.max)
			want := storable(s) && len(s) <= c.max
			if (err == nil) != want {
				t.Fatalf("validateText(%s, %q, %d) = %v; want accepted %v", c.field, s, c.max, err, want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), c.field+" ") {
				t.Fatalf("validateText(%s, %q) = %q; want it to start with the field", c.field, s, err)
			}
		}
	})
}

// FuzzCleanText: whatever the input, the result is valid UTF-8 with no NUL
// byte and at most maxBytes long; an input that was already all that comes
// back unchanged; a longer storable input comes back as its own start, cut on
// a character boundary, ending with "…"; and cleaning twice changes nothing.
func FuzzCleanText(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string, maxBytes int) {
		maxBytes = int(uint(maxBytes) % (2 * MaxErrorBytes)) // a limit from zero to twice the largest used
		got := CleanText(s, maxBytes)
		if !storable(got) || len(got) > maxBytes {
			t.Fatalf("CleanText(%.40q, %d) = %.40q (%d bytes, valid UTF-8 %v, NUL at %d)",
				s, maxBytes, got, len(got), utf8.ValidString(got), strings.IndexByte(got, 0))
		}
		if storable(s) && len(s) <= maxBytes && got != s {
			t.Fatalf("CleanText(%.40q, %d) = %.40q; want the storable input unchanged", s, maxBytes, got)
		}
		if storable(s) && len(s) > maxBytes && maxBytes >= len("…") {
			kept, ok := strings.CutSuffix(got, "…")
			if !ok || !strings.HasPrefix(s, kept) || len(got) < maxBytes-utf8.UTFMax {
				t.Fatalf("CleanText(%.40q, %d) = %.40q (%d bytes); want the input's start, cut on a character boundary, then …", s, maxBytes, got, len(got))
			}
		}
		if again := CleanText(got, maxBytes); again != got {
			t.Fatalf("CleanText is not idempotent: %.40q, then %.40q", got, again)
		}
	})
}

// storable reports whether PostgreSQL text can hold s.
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// asciiLower maps A-Z to a-z and leaves every other byte alone.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
