//go:build linux

// Command pathtrace measures how far one request travels through Airlock's
// source: for one request of each of four paths it records, with entry
// uprobes on every function of the project's packages in the airlock binary,
// the sequence of functions the request ran, maps each to its file, and
// prints the distinct files crossed and the "returns" (how often the path
// enters a file it had already left). It also counts sandbox.Manager and
// sandbox.Live methods and lines per package. bench/pathtrace/run.sh drives
// it; see bench/README.md.
//
// Subcommands:
//
//	pathtrace funcs  -bin B -repo R                  list the probed functions
//	pathtrace probe  -bin B -repo R -state DIR       install the probes (root)
//	pathtrace unprobe                                remove them
//	pathtrace run    -state DIR -path P -url U -key K [-label L]
//	pathtrace analyze -state DIR                    redo the analysis of recorded runs
//	pathtrace counts -repo R
//	pathtrace table  -state DIR                      the table of every path run
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pathtrace funcs|probe|unprobe|run|analyze|counts|table [flags]")
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "funcs":
		err = cmdFuncs(args)
	case "probe":
		err = cmdProbe(args)
	case "unprobe":
		remove()
	case "run":
		err = cmdRun(args)
	case "analyze":
		err = cmdAnalyze(args)
	case "counts":
		err = cmdCounts(args)
	case "table":
		err = cmdTable(args)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pathtrace:", err)
		os.Exit(1)
	}
}
