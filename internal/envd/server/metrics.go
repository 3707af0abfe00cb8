//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Metrics is the GET /metrics body (snake_case, spec §3.5).
type Metrics struct {
	TS          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// cpuWindow is the shortest interval CPU usage is measured over.
const cpuWindow = 100 * time.Millisecond

type cpuTimes struct {
	at          time.Time
	busy, total uint64
}

// metricsSampler measures CPU usage between successive calls.
type metricsSampler struct {
	// mu guards last.
	mu   sync.Mutex
	last cpuTimes
}

func (m *metricsSampler) sample(ctx context.Context) (*Metrics, error) {
	cpuPct, err := m.cpuPercent(ctx)
	if err != nil {
		return nil, err
	}
	out := &Metrics{TS: time.Now().Unix(), CPUCount: runtime.NumCPU(), CPUUsedPct: cpuPct}
	if err := readMeminfo(out); err != nil {
		return nil, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/", &fs); err != nil {
		return nil, fmt.Errorf("statfs /: %w", err)
	}
	bs := uint64(fs.Bsize)
	out.DiskTotal = fs.Blocks * bs
	out.DiskUsed = (fs.Blocks - fs.Bfree) * bs
	return out, nil
}

// cpuPercent returns busy/total over the time since the previous call, or
// over a fresh cpuWindow when that is too short or there is none.
func (m *metricsSampler) cpuPercent(ctx context.Context) (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.last
	if prev.at.IsZero() || time.Since(prev.at) < cpuWindow {
		first, err := readCPU()
		if err != nil {
			return 0, err
		}
		t := time.NewTimer(cpuWindow)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
		prev = first
	}
	cur, err := readCPU()
	if err != nil {
		return 0, err
	}
	m.last = cur
	if cur.total <= prev.total {
		return 0, nil
	}
	pct := 100 * float64(cur.busy-prev.busy) / float64(cur.total-prev.total)
	return math.Round(math.Max(0, math.Min(100, pct))*100) / 100, nil
}

// readCPU reads the aggregate line of /proc/stat.
func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, errors.New("unexpected /proc/stat format")
	}
	var vals []uint64
	for _, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parsing /proc/stat: %w", err)
		}
		vals = append(vals, v)
	}
	// user nice system idle iowait irq softirq steal (guest is part of user).
	var total uint64
	for i, v := range vals {
		if i < 8 {
			total += v
		}
	}
	idle := vals[3]
	if len(vals) > 4 {
		idle += vals[4]
	}
	return cpuTimes{at: time.Now(), busy: total - idle, total: total}, nil
}

// readMeminfo fills the memory fields from /proc/meminfo.
func readMeminfo(out *Metrics) error {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	defer f.Close()
	kv := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		kv[name] = v * 1024 // values are in kB
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	total, ok := kv["MemTotal"]
	if !ok {
		return errors.New("MemTotal missing from /proc/meminfo")
	}
	avail, ok := kv["MemAvailable"]
	if !ok {
		avail = kv["MemFree"] + kv["Buffers"] + kv["Cached"]
	}
	out.MemTotal = total
	if avail < total {
		out.MemUsed = total - avail
	}
	out.MemCache = kv["Cached"] + kv["Buffers"]
	out.MemTotalMiB = out.MemTotal >> 20
	out.MemUsedMiB = out.MemUsed >> 20
	return nil
}
