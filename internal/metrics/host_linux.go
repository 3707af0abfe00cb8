//go:build linux

package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readHost reads memory from /proc/meminfo, CPU jiffies from /proc/stat and
// the size of the file system holding diskPath.
func readHost(diskPath string) (HostSample, cpuTimes, error) {
	var s HostSample
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return s, cpuTimes{}, fmt.Errorf("reading meminfo: %w", err)
	}
	total, avail := meminfo(mem)
	s.MemTotal = total
	if avail <= total {
		s.MemUsed = total - avail
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, cpuTimes{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	cpu, err := parseCPU(stat)
	if err != nil {
		return s, cpuTimes{}, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(diskPath, &fs); err != nil {
		return s, cpuTimes{}, fmt.Errorf("statfs %s: %w", diskPath, err)
	}
	bs := uint64(fs.Bsize)
	s.DiskTotal = fs.Blocks * bs
	s.DiskUsed = (fs.Blocks - fs.Bfree) * bs
	return s, cpu, nil
}

// meminfo returns MemTotal and MemAvailable in bytes.
func meminfo(b []byte) (total, avail uint64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	return total, avail
}

// parseCPU reads the aggregate "cpu" line: idle + iowait are idle, the
// rest (user nice system irq softirq steal) busy; guest time is already in user.
func parseCPU(b []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("unexpected /proc/stat first line %q", line)
	}
	var c cpuTimes
	for i, v := range f[1:] {
		if i >= 8 { // guest, guest_nice are included in user, nice
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parsing /proc/stat: %w", err)
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c, nil
}
