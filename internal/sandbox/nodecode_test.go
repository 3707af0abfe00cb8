package sandbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNoNodeCodeInCore checks that the cluster node's business stays
// behind sandbox.NodeHooks (issue 25): the core imports no artifact store
// and no node package (internal/cluster/wire, the contract's wire facts,
// is allowed), and holds no background upload of its own (the runner and
// its state are internal/cluster/node's upload.go). On the tree before the
// upload moved, it fails: upload.go declared the types upload and
// uploaders.
func TestNoNodeCodeInCore(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock/internal/"
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(p, mod)
			if !ok {
				continue
			}
			if rel == "artifacts" || strings.HasPrefix(rel, "artifacts/") ||
				rel == "cluster" || strings.HasPrefix(rel, "cluster/") && rel != "cluster/wire" {
				t.Errorf("%s imports %s: node code belongs behind NodeHooks (internal/cluster/node)", name, p)
			}
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if strings.Contains(strings.ToLower(ts.Name.Name), "upload") {
					t.Errorf("%s declares type %s: the background upload of paused images is internal/cluster/node's (upload.go)", name, ts.Name.Name)
				}
			}
		}
	}
	if files == 0 {
		t.Fatal("no Go files read: run from the package directory")
	}
}
