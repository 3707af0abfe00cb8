//go:build linux

package microvm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTicks = 100

// Stats implements runtime.Runtime from the host's view of the VMM: its CPU
// time, its resident memory (guest RAM the guest has touched plus the
// VMM's own) and the overlay's allocated size.
func (r *Runtime) Stats(_ context.Context, id, dir string) (runtime.Stats, error) {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return runtime.Stats{}, err
	}
	rec, err := r.readRecord(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	s := runtime.Stats{
		Time:        time.Now(),
		MemoryLimit: uint64(rec.MemoryMB) << 20,
		DiskLimit:   uint64(rec.DiskMB) << 20,
	}
	if dir == "" {
		dir = rec.Dir
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, overlayFile), &st); err == nil {
		s.DiskUsed = uint64(st.Blocks) * 512
	}
	if !alive(rec) {
		return s, nil
	}
	_, fields, err := procStat(rec.PID)
	if err != nil {
		return s, fmt.Errorf("reading VMM stat: %w", err)
	}
	utime, _ := strconv.ParseUint(fields[11], 10, 64)
	stime, _ := strconv.ParseUint(fields[12], 10, 64)
	s.CPUUsageNs = (utime + stime) * uint64(time.Second/clockTicks)
	s.MemoryUsed = statusKB(rec.PID, "VmRSS:") << 10
	s.PIDs = 1
	return s, nil
}

// statusKB reads a "kB" field of /proc/<pid>/status.
func statusKB(pid int, field string) uint64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
