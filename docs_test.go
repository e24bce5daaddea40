package leasework_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every ```go block of the guides (docs/*.md) is a piece of compiled code:
// the line above it, an HTML comment
//
//	<!-- snippet: framework/snippets_test.go startWorker -->
//
// names a Go file of the module and a function in it, and the block's
// lines, stripped of their indentation, blank lines ignored, are a run of
// that function's lines, in order and without a gap. A line "// ..." (or
// "// ... words ...") elides: the pieces around it match in order, with
// anything between. A block may open with an import declaration: each
// import it shows is one of the file's, under the same name. So a guide's
// code stops matching when its function changes, and its function stops
// compiling when the API does: go vet and go test compile every file named
// (each package's snippets_test.go holds those no example shows).
func TestDocsSnippetsAreCompiledCode(t *testing.T) {
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, guide := range guides {
		for _, b := range goBlocks(t, guide) {
			blocks++
			if err := b.check(); err != nil {
				t.Error(err)
			}
		}
	}
	if blocks < 20 {
		t.Fatalf("found %d ```go blocks in docs/*.md; the guides were not read", blocks)
	}
}

// A block is one ```go block of a guide and the source its marker names.
type block struct {
	guide      string // docs/workers.md
	line       int    // the line of its opening fence
	file, name string // the marker's Go file and function; "" without one
	lines      []docLine
}

type docLine struct {
	n    int // line number in the guide
	text string
}

var marker = regexp.MustCompile(`^<!-- snippet: (\S+\.go) (\w+) -->$`)

// goBlocks returns the ```go blocks of a guide, each with the marker on
// the line above it. A marker anywhere else fails the test: it would check
// nothing.
func goBlocks(t *testing.T, guide string) []block {
	t.Helper()
	data, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	guide = filepath.ToSlash(guide)
	var out []block
	var cur *block
	open := false        // inside a fenced block
	var pending []string // the marker on the line above, if any
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(raw)
		if open {
			if trimmed == "```" {
				open = false
				if cur != nil {
					out = append(out, *cur)
					cur = nil
				}
			} else if cur != nil {
				cur.lines = append(cur.lines, docLine{n, raw})
			}
			continue
		}
		m := pending
		pending = marker.FindStringSubmatch(trimmed)
		isGo := trimmed == "```go"
		if m != nil && !isGo {
			t.Errorf("%s:%d: a snippet marker not followed by a ```go block on the next line", guide, n-1)
		}
		if strings.HasPrefix(trimmed, "```") {
			open = true
			if isGo {
				cur = &block{guide: guide, line: n}
				if m != nil {
					cur.file, cur.name = m[1], m[2]
				}
			}
		}
	}
	if open {
		t.Errorf("%s: a code block that never closes", guide)
	}
	if pending != nil {
		t.Errorf("%s: a snippet marker on the last line", guide)
	}
	return out
}

// check reports how the block differs from the function its marker names,
// or nil if it is a run of its lines.
func (b block) check() error {
	where := fmt.Sprintf("%s:%d", b.guide, b.line)
	if b.file == "" {
		return fmt.Errorf("%s: a ```go block without a marker on the line above it, <!-- snippet: dir/file.go function -->, naming the compiled function it is taken from", where)
	}
	where = fmt.Sprintf("%s:%d (snippet of %s %s)", b.guide, b.line, b.file, b.name)
	src, err := os.ReadFile(filepath.FromSlash(b.file))
	if err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, b.file, src, parser.SkipObjectResolution)
	if err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Recv == nil && d.Name.Name == b.name {
			fn = d
		}
	}
	if fn == nil {
		return fmt.Errorf("%s: %s has no function %s", where, b.file, b.name)
	}

	code, err := b.checkImports(f)
	if err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}

	// The function's lines, from its signature to its closing brace.
	first, last := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
	var body []docLine
	for i, l := range strings.Split(string(src), "\n")[first-1 : last] {
		if l = strings.TrimSpace(l); l != "" {
			body = append(body, docLine{first + i, l})
		}
	}

	// The block's pieces between elisions, each matched after the last.
	var pieces [][]docLine
	piece := []docLine{}
	for _, l := range code {
		text := strings.TrimSpace(l.text)
		switch {
		case text == "":
		case text == "// ..." || strings.HasPrefix(text, "// ... "):
			pieces = append(pieces, piece)
			piece = []docLine{}
		default:
			piece = append(piece, docLine{l.n, text})
		}
	}
	pieces = append(pieces, piece)
	from := 0
	for _, p := range pieces {
		if len(p) == 0 {
			continue
		}
		// The earliest start that matches the most of the piece.
		at, most := -1, 0
		for s := from; s < len(body); s++ {
			k := 0
			for k < len(p) && s+k < len(body) && body[s+k].text == p[k].text {
				k++
			}
			if k > most {
				at, most = s, k
			}
			if k == len(p) {
				break
			}
		}
		switch {
		case most == len(p):
			from = at + most
		case most == 0:
			return fmt.Errorf("%s: line %d, %q, is not in %s (%s:%d-%d)%s", where, p[0].n, p[0].text, b.name, b.file, first, last, after(body, from))
		default:
			got := "its end"
			if at+most < len(body) {
				got = fmt.Sprintf("%q (%s:%d)", body[at+most].text, b.file, body[at+most].n)
			}
			return fmt.Errorf("%s: line %d, %q, differs from %s, which has %s after %q", where, p[most].n, p[most].text, b.name, got, p[most-1].text)
		}
	}
	return nil
}

// after says where the match resumed, when an earlier piece matched.
func after(body []docLine, from int) string {
	if from == 0 {
		return ""
	}
	return fmt.Sprintf(" after %q (line %d)", body[from-1].text, body[from-1].n)
}

// checkImports checks the import declaration the block may open with
// against the file's imports, and returns the block's lines after it.
func (b block) checkImports(f *ast.File) ([]docLine, error) {
	i := 0
	for i < len(b.lines) && strings.TrimSpace(b.lines[i].text) == "" {
		i++
	}
	if i == len(b.lines) || !strings.HasPrefix(strings.TrimSpace(b.lines[i].text), "import ") {
		return b.lines, nil
	}
	end := i
	if strings.TrimSpace(b.lines[i].text) == "import (" {
		for end < len(b.lines) && strings.TrimSpace(b.lines[end].text) != ")" {
			end++
		}
	}
	if end == len(b.lines) {
		return nil, fmt.Errorf("line %d: an import declaration that does not close", b.lines[i].n)
	}
	var decl strings.Builder
	decl.WriteString("package p\n")
	for _, l := range b.lines[i : end+1] {
		decl.WriteString(l.text + "\n")
	}
	shown, err := parser.ParseFile(token.NewFileSet(), "", decl.String(), parser.ImportsOnly)
	if err != nil {
		return nil, fmt.Errorf("line %d: %v", b.lines[i].n, err)
	}
	var have []string
	for _, imp := range f.Imports {
		have = append(have, importString(imp))
	}
	for _, imp := range shown.Imports {
		if s := importString(imp); !slices.Contains(have, s) {
			return nil, fmt.Errorf("the block imports %s, which %s does not (it imports %s)", s, b.file, strings.Join(have, ", "))
		}
	}
	return b.lines[end+1:], nil
}

// importString is an import as written: its name, if any, and its path.
func importString(imp *ast.ImportSpec) string {
	path, _ := strconv.Unquote(imp.Path.Value)
	if imp.Name != nil {
		return imp.Name.Name + " " + strconv.Quote(path)
	}
	return strconv.Quote(path)
}
