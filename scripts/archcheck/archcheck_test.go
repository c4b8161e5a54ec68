// Package archcheck keeps the map of docs/architecture.md true: every
// top-level folder and every Go package of the module has a row, and every
// project import of a package's non-test files is allowed by its row.
package archcheck

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/ticketing/ticketing"

var root = filepath.Join("..", "..")

type row struct{ mayImport map[string]bool }

// mapRows parses the table between the map markers: path → allowed imports.
func mapRows(t *testing.T) map[string]row {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, "<!-- map:begin -->"), strings.Index(s, "<!-- map:end -->")
	if i < 0 || j < i {
		t.Fatal("docs/architecture.md: no <!-- map:begin --> … <!-- map:end --> table")
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := map[string]row{}
	for _, line := range strings.Split(s[i:j], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		m := code.FindStringSubmatch(cells[1])
		r := row{mayImport: map[string]bool{}}
		for _, imp := range code.FindAllStringSubmatch(cells[3], -1) {
			r.mayImport[imp[1]] = true
		}
		rows[m[1]] = r
	}
	return rows
}

// trackedFiles lists the files git tracks (the tree as committed, plus what
// is staged), relative to the root; nil outside a checkout.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestEveryFolderAndPackageIsMapped(t *testing.T) {
	rows := mapRows(t)
	files := trackedFiles(t)
	top := map[string]bool{}
	pkgs := map[string]bool{}
	for _, f := range files {
		dir := filepath.Dir(f)
		if dir == "." {
			continue
		}
		first := strings.Split(f, "/")[0]
		top[first] = true
		if strings.HasPrefix(f, "client/") && !strings.HasPrefix(f, "client/wire/") && !strings.HasPrefix(f, "client/testkit/") && strings.Count(f, "/") > 1 {
			continue // client/<lang>/: one row for all languages
		}
		if strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "_test.go") && strings.HasPrefix(dir, "scripts/archcheck") {
			pkgs[dir] = true
		}
	}
	if len(files) < 10 {
		t.Fatalf("git listed only %d files", len(files))
	}
	var missing []string
	for d := range top {
		if _, ok := rows[d]; !ok {
			missing = append(missing, d+" (top-level folder)")
		}
	}
	for p := range pkgs {
		if strings.Contains(p, "/testdata") {
			continue
		}
		if _, ok := rows[p]; !ok {
			missing = append(missing, p+" (Go package)")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("docs/architecture.md's map has no row for %s", m)
	}
}

func TestImportsFollowTheMap(t *testing.T) {
	rows := mapRows(t)
	fset := token.NewFileSet()
	for _, f := range trackedFiles(t) {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			continue
		}
		dir := filepath.Dir(f)
		r, ok := rows[dir]
		if !ok {
			continue // reported by TestEveryFolderAndPackageIsMapped (client/<lang> Go files are not the module's)
		}
		af, err := parser.ParseFile(fset, filepath.Join(root, f), nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, imp := range af.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			p = strings.TrimPrefix(p, module+"/")
			if !r.mayImport[p] {
				t.Errorf("%s imports %s, which the map's row for %s does not allow (docs/architecture.md)", f, p, dir)
			}
		}
	}
}
