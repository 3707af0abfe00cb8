// Package gocount counts what a layout step changes in Go code: the methods
// of a named type (go/ast) and the lines of each package directory. Used by
// bench/cmd/methodcount and bench/pathtrace.
package gocount

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MethodCount counts the methods declared on type name (value or pointer
// receiver) in every .go file of dir (test files apart).
func MethodCount(dir, name string) (prod, exported, test int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("reading %s: %w", dir, err)
	}
	fset := token.NewFileSet()
	found := false
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("parsing %s: %w", e.Name(), err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
						found = true
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) != 1 || recvName(d.Recv.List[0].Type) != name {
					continue
				}
				if strings.HasSuffix(e.Name(), "_test.go") {
					test++
				} else {
					prod++
					if d.Name.IsExported() {
						exported++
					}
				}
			}
		}
	}
	if !found {
		return 0, 0, 0, fmt.Errorf("no type %s in %s", name, dir)
	}
	return prod, exported, test, nil
}

func recvName(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// PkgLines is the Go lines of one package directory, non-test and test apart.
type PkgLines struct {
	Dir        string
	Prod, Test int
	ProdFiles  int
	TestFiles  int
}

// LinesPerPackage counts the lines of .go files in each directory under root
// (each directory is a package), non-test and test apart.
func LinesPerPackage(root string) ([]PkgLines, error) {
	by := map[string]*PkgLines{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || n == "testdata" || (strings.HasPrefix(n, ".") && p != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n := bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			n++
		}
		dir, _ := filepath.Rel(filepath.Dir(root), filepath.Dir(p))
		pl := by[dir]
		if pl == nil {
			pl = &PkgLines{Dir: dir}
			by[dir] = pl
		}
		if strings.HasSuffix(p, "_test.go") {
			pl.Test += n
			pl.TestFiles++
		} else {
			pl.Prod += n
			pl.ProdFiles++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", root, err)
	}
	out := make([]PkgLines, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out, nil
}
