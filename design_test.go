package corral_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// testKits are the internal packages only tests (and the soak) use: the
// design names them per package, not file by file.
var testKits = []string{"observetest", "readmetest", "redisproc", "redistest", "testkit"}

// docs/design.md's "Where things live" names every non-test .go file of the
// library: the root's in its file-by-file table, every other package's in
// its row of the packages table (the row whose first cell starts with the
// package's path in backticks). A file added, moved or renamed without its
// line there fails here, with the package and the file; a new internal
// package fails until it has a row.
func TestDesignNamesEveryFile(t *testing.T) {
	t.Parallel()
	_, where, ok := strings.Cut(readmetest.Read(t, "docs/design.md"), "\n## 7. Where things live\n")
	if !ok {
		t.Fatal(`docs/design.md: no section "## 7. Where things live"`)
	}
	where, _, _ = strings.Cut(where, "\n## ")
	rootFiles, ok := readmetest.Between(where, "\n### The root package, file by file\n", "\n### ")
	if !ok {
		t.Fatal(`docs/design.md: no "### The root package, file by file" in "Where things live"`)
	}
	rows := packageRows(where)
	var checked int
	for _, dir := range libraryDirs(t) {
		text := rootFiles
		if dir != "." {
			if text, ok = rows[dir]; !ok {
				t.Errorf("docs/design.md: package %s has no row in the packages table of \"Where things live\"", dir)
				continue
			}
		}
		for _, name := range goFiles(t, dir) {
			if !namesFile(text, name) {
				t.Errorf("docs/design.md does not name %s in %s of \"Where things live\"", name, packageName(dir))
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no library file found: the check is broken")
	}
}

// The limits docs/design.md's "Limits" sets the library: no file over
// maxFileLines lines, no function (its doc comment aside) over
// maxFuncLines, and the root package, the API and the protocol, within
// maxRootLines in all. A change that breaks one fails here, naming it.
const maxFileLines, maxFuncLines, maxRootLines = 400, 60, 5650

func TestLibraryLimits(t *testing.T) {
	t.Parallel()
	root := 0
	for _, dir := range libraryDirs(t) {
		for _, name := range goFiles(t, dir) {
			path := filepath.Join(dir, name)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Count(string(src), "\n")
			if dir == "." {
				root += lines
			}
			if lines > maxFileLines {
				t.Errorf("%s: %d lines, over %d", path, lines, maxFileLines)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok {
					if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
						t.Errorf("%s: func %s is %d lines, over %d", path, fn.Name, n, maxFuncLines)
					}
				}
			}
		}
	}
	if root > maxRootLines {
		t.Errorf("the root package is %d lines, over %d: what is not the API or the protocol belongs in an internal package", root, maxRootLines)
	}
	t.Logf("root package: %d lines", root)
}

// libraryDirs returns the library's package directories: the root, lock,
// the adapters, and every internal package but the test kits.
func libraryDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{".", "lock", "corralhttp", "corralprom", "corralotel"}
	internal, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range internal {
		if e.IsDir() && !slices.Contains(testKits, e.Name()) {
			dirs = append(dirs, "internal/"+e.Name())
		}
	}
	return dirs
}

// goFiles returns the names of dir's non-test .go files.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		if name := filepath.Base(p); !strings.HasSuffix(name, "_test.go") {
			names = append(names, name)
		}
	}
	return names
}

// packageRows maps each package path that starts a table row's first cell
// in backticks (| `internal/near` | ...) to the whole row.
func packageRows(text string) map[string]string {
	rows := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		cell, ok := strings.CutPrefix(line, "| `")
		if !ok {
			continue
		}
		if path, _, ok := strings.Cut(cell, "`"); ok {
			rows[path] = line
		}
	}
	return rows
}

// namesFile reports whether text names the file name as a word of its own:
// health.go, not transport_health.go nor internal/near/health.go's
// neighbour near_health.go.
func namesFile(text, name string) bool {
	return regexp.MustCompile(`(^|[^\w./-])` + regexp.QuoteMeta(name) + `($|[^\w])`).MatchString(text)
}

// packageName says where in "Where things live" dir's files are named.
func packageName(dir string) string {
	if dir == "." {
		return "the root package's file-by-file table"
	}
	return dir + "'s row"
}
