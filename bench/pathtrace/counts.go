//go:build linux

package main

import (
	"bufio"
	"bytes"
	"flag"
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

// methodCount counts the methods declared on type name (value or pointer
// receiver) in every .go file of dir (test files apart).
func methodCount(dir, name string) (prod, exported, test int, err error) {
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

type pkgLines struct {
	dir        string
	prod, test int
	prodFiles  int
	testFiles  int
}

// linesPerPackage counts the lines of .go files in each directory under root
// (each directory is a package), non-test and test apart.
func linesPerPackage(root string) ([]pkgLines, error) {
	by := map[string]*pkgLines{}
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
			pl = &pkgLines{dir: dir}
			by[dir] = pl
		}
		if strings.HasSuffix(p, "_test.go") {
			pl.test += n
			pl.testFiles++
		} else {
			pl.prod += n
			pl.prodFiles++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", root, err)
	}
	out := make([]pkgLines, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out, nil
}

func cmdCounts(args []string) error {
	fset := flag.NewFlagSet("counts", flag.ExitOnError)
	repo := fset.String("repo", ".", "the checkout")
	types := fset.String("types", "internal/sandbox.Manager,internal/sandbox.Live", "DIR.Type,… whose methods to count")
	_ = fset.Parse(args)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintln(w, "| type | methods (non-test files) | of them exported | methods in _test.go |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range strings.Split(*types, ",") {
		i := strings.LastIndex(t, ".")
		if i < 0 {
			return fmt.Errorf("-types: %q is not DIR.Type", t)
		}
		p, ex, tst, err := methodCount(filepath.Join(*repo, t[:i]), t[i+1:])
		if err != nil {
			fmt.Fprintf(w, "| %s | %v | | |\n", t, err)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", t, p, ex, tst)
	}
	pk, err := linesPerPackage(filepath.Join(*repo, "internal"))
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| package | lines (files) | test lines (files) |")
	fmt.Fprintln(w, "|---|---|---|")
	var tp, tt int
	for _, p := range pk {
		fmt.Fprintf(w, "| %s | %d (%d) | %d (%d) |\n", p.dir, p.prod, p.prodFiles, p.test, p.testFiles)
		tp += p.prod
		tt += p.test
	}
	fmt.Fprintf(w, "| **internal/ total** | %d | %d |\n", tp, tt)
	return nil
}
