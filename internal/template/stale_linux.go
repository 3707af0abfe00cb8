//go:build linux

package template

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// killBuilders SIGKILLs processes still working on the interrupted build in
// dir (a .tmp-* directory): mmdebstrap's helpers (apt, dpkg, maintainer
// scripts) can outlive a killed daemon and would keep writing into a
// directory that is being removed. A process counts when dir appears in its
// command line, or its root or working directory is inside dir.
func killBuilders(dir string) int {
	dir = filepath.Clean(dir)
	self := os.Getpid()
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		if !usesDir(p, dir) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

func usesDir(proc, dir string) bool {
	for _, link := range []string{"root", "cwd"} {
		if t, err := os.Readlink(filepath.Join(proc, link)); err == nil && (t == dir || strings.HasPrefix(t, dir+"/")) {
			return true
		}
	}
	cmd, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	return err == nil && bytes.Contains(cmd, []byte(dir))
}
