package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProofComparisonsAreConstantTime is a static check over the module's
// Go sources (server, client, admin, cmd): a handshake proof or MAC is never
// compared with ==, !=, bytes.Equal, bytes.Compare or reflect.DeepEqual —
// only through ProofEqual (hmac.Equal), whose time does not depend on where
// the first differing byte is (protocol.md §1.3: "compared in constant
// time"). Test files are left out: they compare known vectors, not secrets
// (and the check shows it works: it flags their plain comparisons).
func TestProofComparisonsAreConstantTime(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root {
				name := d.Name()
				if name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module (the other languages' clients)
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name == "ProofEqual" {
				return false // the one place allowed to compare, with hmac.Equal
			}
			var operands []ast.Expr
			switch x := n.(type) {
			case *ast.BinaryExpr:
				if (x.Op == token.EQL || x.Op == token.NEQ) && !isNil(x.X) && !isNil(x.Y) {
					operands = []ast.Expr{x.X, x.Y}
				}
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok {
						switch id.Name + "." + sel.Sel.Name {
						case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal":
							operands = x.Args
						}
					}
				}
			}
			for _, op := range operands {
				if secretish(op) {
					t.Errorf("%s: proof compared without ProofEqual (constant time)", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}

// secretish reports whether an operand names a proof or a MAC (proof,
// Proof, mac, MAC in an identifier or field of the expression).
func secretish(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			l := strings.ToLower(id.Name)
			if strings.Contains(l, "proof") || l == "mac" || strings.HasSuffix(l, "mac") {
				found = true
			}
		}
		return !found
	})
	return found
}

// isNil reports the nil identifier: a nil check compares no secret.
func isNil(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "nil"
}
