// Package printable says whether bytes can be shown as text, for the
// console's and the CLI's previews of payloads, steps and outputs.
package printable

import (
	"unicode"
	"unicode/utf8"
)

// IsText reports whether b is UTF-8 text: valid, and no control characters
// but tabs and line ends.
func IsText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}
