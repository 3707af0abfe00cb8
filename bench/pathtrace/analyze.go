//go:build linux

package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// gkey names one goroutine of one process.
type gkey struct {
	PID  int
	GoID uint64
}

// result is one path's figures.
type result struct {
	Path       string  `json:"path"`
	Label      string  `json:"label"`
	Seconds    float64 `json:"seconds"`     // the traced window
	Baseline   float64 `json:"baseline_s"`  // the idle window before it
	Events     int     `json:"events"`      // function entries kept
	Dropped    int     `json:"dropped"`     // entries of background goroutines
	Lost       int     `json:"lost"`        // ring buffer overruns (0 or the figures are a floor)
	Goroutines int     `json:"goroutines"`  // goroutines kept
	Processes  int     `json:"processes"`   // processes they ran in
	Funcs      int     `json:"funcs"`       // distinct functions
	Files      int     `json:"files"`       // distinct files crossed
	Packages   int     `json:"packages"`    // distinct packages (directories)
	Returns    int     `json:"returns"`     // re-entries of a file already left, per goroutine, summed (loops count each turn)
	ReturnEdge int     `json:"return_edge"` // distinct (function before → function entered) pairs among them
	Interleave int     `json:"returns_all"` // re-entries in the time-ordered merge of all kept goroutines
}

// filterRequest keeps the goroutines that did the request's work. A goroutine
// that ran during the idle baseline window is a background loop (a ticker, a
// flusher, a watcher) and is dropped, even when the request gives it new work
// (the sandbox watcher finding the new sandbox). Of the others, a goroutine
// that only ran functions the idle daemon also runs (a health check, a
// heartbeat's helper) is dropped too. A goroutine idle in the baseline and
// busy in the window (a kept-alive connection from the api tier) is kept.
func filterRequest(base, win []event) (kept map[gkey][]event, dropped int) {
	idle := map[int]bool{}
	running := map[gkey]bool{}
	for _, e := range base {
		idle[e.Func] = true
		running[gkey{e.PID, e.GoID}] = true
	}
	by := map[gkey][]event{}
	for _, e := range win {
		k := gkey{e.PID, e.GoID}
		by[k] = append(by[k], e)
	}
	kept = map[gkey][]event{}
	for k, evs := range by {
		novel := false
		for _, e := range evs {
			if !idle[e.Func] {
				novel = true
				break
			}
		}
		if novel && !running[k] {
			kept[k] = evs
		} else {
			dropped += len(evs)
		}
	}
	return kept, dropped
}

// returns counts, over seq (the files of the functions funcs, in the order
// entered), how many times the sequence enters a file it had already left.
// Each re-entry also adds the pair (function entered before it → function
// entered) to edges, so len(edges) counts a loop that bounces between two
// files once, and two different calls back into a file twice.
func returns(seq []string, funcs []int, edges map[[2]int]bool) int {
	n := 0
	seen := map[string]bool{}
	prev := ""
	for i, f := range seq {
		if f == prev {
			continue
		}
		if seen[f] {
			n++
			if edges != nil {
				edges[[2]int{funcs[i-1], funcs[i]}] = true
			}
		}
		seen[f] = true
		prev = f
	}
	return n
}

func pkgOf(file string) string {
	if i := strings.LastIndex(file, "/"); i >= 0 {
		return file[:i]
	}
	return "."
}

// analyze computes the figures of the kept goroutines and writes the path,
// goroutine by goroutine (file transitions with the function entered), to w.
func analyze(r *result, fns []fn, kept map[gkey][]event, labels map[int]string, w io.Writer) {
	keys := make([]gkey, 0, len(kept))
	var all []event
	for k, evs := range kept {
		keys = append(keys, k)
		all = append(all, evs...)
	}
	sort.Slice(keys, func(i, j int) bool { return kept[keys[i]][0].TS < kept[keys[j]][0].TS })
	sort.SliceStable(all, func(i, j int) bool { return all[i].TS < all[j].TS })
	files, funcs, pkgs, procs := map[string]bool{}, map[int]bool{}, map[string]bool{}, map[int]bool{}
	edges := map[[2]int]bool{}
	r.Goroutines = len(keys)
	for _, k := range keys {
		evs := kept[k]
		procs[k.PID] = true
		seq, ids := make([]string, len(evs)), make([]int, len(evs))
		for i, e := range evs {
			f := fns[e.Func].File
			seq[i], ids[i] = f, e.Func
			files[f], funcs[e.Func], pkgs[pkgOf(f)] = true, true, true
		}
		n := returns(seq, ids, edges)
		r.Returns += n
		r.Events += len(evs)
		fmt.Fprintf(w, "\n## goroutine %d of pid %d (%s): %d entries, %d returns, first at +%.3fs\n",
			k.GoID, k.PID, labels[k.PID], len(evs), n, evs[0].TS-all[0].TS)
		prev := ""
		for i, e := range evs {
			if seq[i] == prev {
				continue
			}
			prev = seq[i]
			fmt.Fprintf(w, "%-55s %s\n", seq[i], strings.TrimPrefix(fns[e.Func].Name, module))
		}
	}
	r.ReturnEdge = len(edges)
	seq := make([]string, len(all))
	for i, e := range all {
		seq[i] = fns[e.Func].File
	}
	r.Interleave = returns(seq, nil, nil)
	r.Files, r.Funcs, r.Packages, r.Processes = len(files), len(funcs), len(pkgs), len(procs)
	perProc := map[int]map[string]bool{}
	for _, e := range all {
		if perProc[e.PID] == nil {
			perProc[e.PID] = map[string]bool{}
		}
		perProc[e.PID][fns[e.Func].File] = true
	}
	pids := make([]int, 0, len(perProc))
	for p := range perProc {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	fmt.Fprintf(w, "\n## files per process\n")
	for _, p := range pids {
		fmt.Fprintf(w, "pid %d (%s): %d files\n", p, labels[p], len(perProc[p]))
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\n## the %d files\n%s\n", len(names), strings.Join(names, "\n"))
}
