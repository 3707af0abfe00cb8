//go:build linux

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// probeState is what `probe` leaves in the state dir for `run`.
type probeState struct {
	Bin   string
	Repo  string
	Funcs []fn
}

func loadState(dir string) (*probeState, error) {
	b, err := os.ReadFile(filepath.Join(dir, "probes.json"))
	if err != nil {
		return nil, fmt.Errorf("no probes installed in %s (run `pathtrace probe` first): %w", dir, err)
	}
	var s probeState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading %s/probes.json: %w", dir, err)
	}
	return &s, nil
}

func cmdFuncs(args []string) error {
	fs := flag.NewFlagSet("funcs", flag.ExitOnError)
	bin := fs.String("bin", "", "the airlock binary")
	repo := fs.String("repo", ".", "the checkout it was built from")
	_ = fs.Parse(args)
	fns, err := projectFuncs(*bin, *repo)
	if err != nil {
		return err
	}
	for _, f := range fns {
		fmt.Printf("%d\t0x%x\t%s\t%s\n", f.ID, f.Offset, f.File, f.Name)
	}
	return nil
}

func cmdProbe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	bin := fs.String("bin", "", "the airlock binary the daemons run")
	repo := fs.String("repo", ".", "the checkout it was built from")
	state := fs.String("state", "", "a directory for the probe list and the traces")
	bufKB := fs.Int("buffer-kb", 262144, "ring buffer per CPU, KiB")
	_ = fs.Parse(args)
	if *bin == "" || *state == "" {
		return fmt.Errorf("probe needs -bin and -state")
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		return fmt.Errorf("binary path: %w", err)
	}
	fns, err := projectFuncs(abs, *repo)
	if err != nil {
		return err
	}
	off, err := goidOffset(abs)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := install(abs, fns, off, *bufKB); err != nil {
		remove()
		return err
	}
	fmt.Fprintf(os.Stderr, "pathtrace: %d uprobes on %s (goid at g+%d) in %s\n", len(fns), abs, off, time.Since(t0).Round(time.Millisecond))
	if err := os.MkdirAll(*state, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	b, err := json.Marshal(probeState{Bin: abs, Repo: *repo, Funcs: fns})
	if err != nil {
		return fmt.Errorf("encoding the probe list: %w", err)
	}
	return os.WriteFile(filepath.Join(*state, "probes.json"), b, 0o644)
}
