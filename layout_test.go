package leasework_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rigs is where the test rigs live: packages that start servers, import
// drivers and kill processes, for tests alone.
const rigs = "github.com/leasework/leasework/internal/rig/"

// notShipped are the folders whose code is not part of what users link:
// the rigs themselves, and programs that start a throwaway server to show
// or measure something (examples/, bench/). The modules of their own
// under console/ and contrib/ ship, and are checked.
var notShipped = []string{"internal/rig", "examples", "bench", "model", "docs"}

// What ships (the library's packages, the CLI, the optional modules)
// never imports a test rig: a user's program links no code that starts a
// server or reads a test's environment.
func TestShippedPackagesImportNoRig(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			hidden := path != "." && strings.HasPrefix(d.Name(), ".")
			if hidden || d.Name() == "testdata" || slices.Contains(notShipped, filepath.ToSlash(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if strings.HasPrefix(p, rigs) {
				t.Errorf("%s imports the test rig %s", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files; the walk missed the module's packages", checked)
	}
}

// A driver imports, of this module, only the contract (the root package)
// and the internal leaves it needs (dialing, error prefixes): the SQL and
// the store stay in lease, which drivers never reach.
func TestDriversImportOnlyTheContract(t *testing.T) {
	const module = "github.com/leasework/leasework"
	allowed := []string{module, module + "/internal/netdial", module + "/internal/errprefix"}
	checked := 0
	for _, dir := range []string{"driver/pgx", "driver/pq"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					t.Fatal(err)
				}
				if (p == module || strings.HasPrefix(p, module+"/")) && !slices.Contains(allowed, p) {
					t.Errorf("%s imports %s; a driver imports only the root package of this module", path, p)
				}
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d files; the drivers' files were not found", checked)
	}
}
