// Command methodcount prints how many methods named types have, and how many
// Go lines each package directory holds, so a layout step can be measured
// before and after (issue 25).
//
//	go run ./bench/cmd/methodcount -types Manager,Live ./internal/sandbox
//	go run ./bench/cmd/methodcount -lines ./internal
//
// Counting is bench/internal/gocount's (shared with bench/pathtrace): methods
// with go/ast over every non-test .go file (build tags ignored), lines per
// directory, non-test and test apart.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/internal/gocount"
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
	for _, name := range names {
		n, _, _, err := gocount.MethodCount(dir, name)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\t%d methods\n", dir, name, n)
	}
	return nil
}

func countLines(root string) error {
	pk, err := gocount.LinesPerPackage(root)
	if err != nil {
		return err
	}
	fmt.Printf("%-40s %7s %7s\n", "package", "lines", "tests")
	for _, p := range pk {
		fmt.Printf("%-40s %7d %7d\n", p.Dir, p.Prod, p.Test)
	}
	return nil
}
