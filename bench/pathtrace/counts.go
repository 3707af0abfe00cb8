//go:build linux

package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/internal/gocount"
)

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
		p, ex, tst, err := gocount.MethodCount(filepath.Join(*repo, t[:i]), t[i+1:])
		if err != nil {
			fmt.Fprintf(w, "| %s | %v | | |\n", t, err)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", t, p, ex, tst)
	}
	pk, err := gocount.LinesPerPackage(filepath.Join(*repo, "internal"))
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| package | lines (files) | test lines (files) |")
	fmt.Fprintln(w, "|---|---|---|")
	var tp, tt int
	for _, p := range pk {
		fmt.Fprintf(w, "| %s | %d (%d) | %d (%d) |\n", p.Dir, p.Prod, p.ProdFiles, p.Test, p.TestFiles)
		tp += p.Prod
		tt += p.Test
	}
	fmt.Fprintf(w, "| **internal/ total** | %d | %d |\n", tp, tt)
	return nil
}
