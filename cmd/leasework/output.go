package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/leasework/leasework/internal/printable"
)

// printer writes a command's result: an aligned table for people, or one
// JSON document for scripts.
type printer struct {
	w    io.Writer
	json bool
}

// JSON writes v as one indented JSON document.
func (p *printer) JSON(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Table writes rows under header, aligned in columns. Cells are made safe
// for a one-line cell first (see cell).
func (p *printer) Table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	writeRow := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				io.WriteString(tw, "\t")
			}
			io.WriteString(tw, cell(c))
		}
		io.WriteString(tw, "\n")
	}
	if header != nil {
		writeRow(header)
	}
	for _, r := range rows {
		writeRow(r)
	}
	return tw.Flush()
}

// Linef writes one line of text.
func (p *printer) Linef(format string, args ...any) error {
	_, err := fmt.Fprintf(p.w, format+"\n", args...)
	return err
}

// cell flattens s to one line: every run of white space or control
// characters (newlines and tabs of a stack trace, say) becomes one space, so
// that the table stays aligned.
func cell(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// truncate shortens s to at most n characters, marking the cut with "...".
func truncate(s string, n int) string {
	s = cell(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// preview shows b in a cell of at most about n characters: as text, on
// one line and cut short like truncate, when it is UTF-8 text; otherwise
// "not text:" and its first bytes in hex.
func preview(b []byte, n int) string {
	if printable.IsText(b) {
		return truncate(string(b), n)
	}
	const prefix = "not text: "
	shown := b[:min(len(b), (n-len(prefix)-3)/2)]
	s := prefix + hex.EncodeToString(shown)
	if len(shown) < len(b) {
		s += "..."
	}
	return s
}

// bytesCell says how many bytes a value has.
func bytesCell(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return itoa(int64(n)) + " bytes"
}

// timeCell formats a database time for a table: UTC, to the second.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// orDash returns s, or "-" for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
