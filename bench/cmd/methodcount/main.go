// Command methodcount prints how many methods named types have, and how many
// Go lines each package directory holds, so a layout step can be measured
// before and after (issue 25).
//
//	go run ./bench/cmd/methodcount -types Manager,Live ./internal/sandbox
//	go run ./bench/cmd/methodcount -lines ./internal
//
// Methods are counted with go/ast over every .go file of the directory that is
// not a _test.go file (build tags ignored: all files). Lines are counted per
// directory, non-test and test apart.
package main

import (
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

func main() {
	types := flag.String("types", "", "comma-separated receiver type names to count methods of")
	lines := flag.Bool("lines", false, "print Go lines per package directory under each argument")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: methodcount [-types A,B] [-lines] DIR...")
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		if *types != "" {
			if err := countMethods(dir, strings.Split(*types, ",")); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		if *lines {
			if err := countLines(dir); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
}

func countMethods(dir string, names []string) error {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	counts := map[string]int{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", n, err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			counts[recvName(fd.Recv.List[0].Type)]++
		}
	}
	for _, name := range names {
		fmt.Printf("%s\t%s\t%d methods\n", dir, name, counts[name])
	}
	return nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

func countLines(root string) error {
	type tally struct{ src, test int }
	per := map[string]*tally{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if per[dir] == nil {
			per[dir] = &tally{}
		}
		n := bytes.Count(b, []byte("\n"))
		if strings.HasSuffix(path, "_test.go") {
			per[dir].test += n
		} else {
			per[dir].src += n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walking %s: %w", root, err)
	}
	dirs := make([]string, 0, len(per))
	for d := range per {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	fmt.Printf("%-40s %7s %7s\n", "package", "lines", "tests")
	for _, d := range dirs {
		fmt.Printf("%-40s %7d %7d\n", d, per[d].src, per[d].test)
	}
	return nil
}
