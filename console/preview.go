package console

import (
	"encoding/hex"
	"unicode/utf8"

	"github.com/leasework/leasework/internal/printable"
)

// preview is how an event page shows bytes (a payload, a progress): as
// text when they are UTF-8 text, otherwise as a hex dump; at most a cap.
type preview struct {
	Size      int    // the whole value's length in bytes
	Shown     int    // the bytes shown
	Text      string // the bytes shown, as text; or
	Hex       string // the bytes shown, as a hex dump
	Truncated bool   // Shown < Size
}

// newPreview previews the first maxBytes of b. A cut falls on a character
// boundary when b is text.
func newPreview(b []byte, maxBytes int) preview {
	p := preview{Size: len(b)}
	shown := b
	if len(shown) > maxBytes {
		shown = shown[:maxBytes]
		// Drop a character the cap cut in two, if b is text.
		for cut := 1; cut < utf8.UTFMax && cut < len(shown) && !utf8.Valid(shown); cut++ {
			if utf8.Valid(shown[:len(shown)-cut]) {
				shown = shown[:len(shown)-cut]
			}
		}
	}
	p.Shown, p.Truncated = len(shown), len(shown) < len(b)
	if printable.IsText(shown) {
		p.Text = string(shown)
	} else {
		p.Hex = hex.Dump(shown)
	}
	return p
}
