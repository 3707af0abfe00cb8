//go:build linux

package oomguard

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// KernelKilled reports whether the guest kernel's log says its OOM killer
// killed pid ("Out of memory: Killed process <pid> (…)"; the agent runs as
// root, so it may read the log; under gVisor the log has no such line).
func KernelKilled(pid int) bool {
	buf := make([]byte, 1<<20)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil || n <= 0 {
		return false
	}
	return bytes.Contains(buf[:n], []byte("Killed process "+strconv.Itoa(pid)+" ("))
}
