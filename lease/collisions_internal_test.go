package lease

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every name the migrations and the statements derive from the table's
// name is in derivedObjects, so that Migrate checks it; a suffix added
// without an entry fails here.
func TestDerivedObjectsAreComplete(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sqls, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range append(files, sqls...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range namesOf(string(b)) {
			seen++
			o, ok := derivedObjects[n]
			switch {
			case !ok:
				t.Errorf("%s names {{name %q}}, which derivedObjects lacks: say what kind of object it is", f, n)
			case o.kind != inTable && o.use == "":
				t.Errorf("derivedObjects[%q] does not say what the table uses it for", n)
			case o.kind == ownTable && len(o.columns) == 0:
				t.Errorf("derivedObjects[%q] is a table without columns", n)
			}
		}
	}
	if seen < len(derivedObjects) {
		t.Errorf("found %d names in the sources; derivedObjects has %d: is the glob wrong?", seen, len(derivedObjects))
	}
	for _, m := range Migrations() {
		for _, n := range namesOf(m.sql) {
			if _, ok := derivedObjects[n]; !ok {
				t.Errorf("migration %d names %q, which derivedObjects lacks", m.Version, n)
			}
		}
	}
}
