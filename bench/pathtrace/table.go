//go:build linux

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// cmdTable prints one markdown row per path run in the state dir.
func cmdTable(args []string) error {
	fs := flag.NewFlagSet("table", flag.ExitOnError)
	state := fs.String("state", "", "the state dir")
	_ = fs.Parse(args)
	fmt.Println("| path | request | files | returns, distinct (function → function) | returns, every turn of a loop | returns, all goroutines merged by time | packages | functions | goroutines | processes | entries kept / dropped / lost | traced s (idle baseline s) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, name := range []string{"create", "exec", "cluster-create", "pause-resume"} {
		b, err := os.ReadFile(filepath.Join(*state, name+".json"))
		if err != nil {
			fmt.Printf("| %s | not run | | | | | | | | | | |\n", name)
			continue
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s.json: %w", name, err)
		}
		fmt.Printf("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d / %d / %d | %.2f (%.1f) |\n",
			r.Path, r.Label, r.Files, r.ReturnEdge, r.Returns, r.Interleave, r.Packages, r.Funcs, r.Goroutines, r.Processes,
			r.Events, r.Dropped, r.Lost, r.Seconds, r.Baseline)
	}
	return nil
}
